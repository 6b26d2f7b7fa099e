"""`hprm dashboard` on a real running program (tests/programs/ticker.py: a
100 Hz source and a sink, one process each): `/metrics` parses as
OpenMetrics and its counters move, the rates and tags agree with what the
federates report (`hprm ps --json`), the page loads in a real headless
browser (Debian's chromium) and shows the program, and it is read-only."""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).parent
HPRM = Path(sys.executable).parent / "hprm"
ROOT = HERE.parents[1]

prometheus = pytest.importorskip("prometheus_client.openmetrics.parser", reason="pip install prometheus_client (the test command does)")


@pytest.fixture(scope="module")
def running(daemons_built):
    """The ticker running (for 60 s of logical time at most) and a dashboard
    reading its runtime directory, shared by this module's tests (each only
    reads); both stopped afterwards."""
    # Short: runtime directories hold Unix sockets, whose paths are bounded
    # (hprm_node::status::runtime_base ignores a longer XDG_RUNTIME_DIR).
    base = tempfile.mkdtemp(prefix="hdash", dir="/tmp")
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=base)
    # Their output goes to files, not pipes: a pipe nobody reads until the
    # end fills (64 KiB) and then blocks the process writing to it, and a
    # dashboard blocked on a log line serves no page.
    ticker_log, dash_log = Path(base) / "ticker.log", Path(base) / "dashboard.log"
    with open(ticker_log, "w") as out:
        ticker = subprocess.Popen([sys.executable, str(HERE / "programs" / "ticker.py"), "6000"], env=env, stdout=out, stderr=subprocess.STDOUT)
    with open(dash_log, "w") as out:
        dash = subprocess.Popen([str(HPRM), "dashboard", "--listen", "127.0.0.1:0", "--runtime-base", base], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r"http://(127\.0\.0\.1:\d+)/", dash_log.read_text())):
            assert dash.poll() is None and time.monotonic() < deadline, f"the dashboard said no address:\n{dash_log.read_text()}"
            time.sleep(0.05)
        url = f"http://{m.group(1)}"
        # Both federates reporting messages (a status file is written at
        # start, then once a second).
        deadline = time.monotonic() + 60
        while True:
            snap = get_json(url + "/api/programs")
            feds = {f["name"]: f for p in snap["programs"] for f in p["federates"] if p["name"] == "ticker"}
            if len(feds) == 2 and all(f["status"] and f["status"]["messages_in"] + f["status"]["messages_out"] > 0 for f in feds.values()):
                break
            assert time.monotonic() < deadline, f"the ticker did not report within 60 s: {snap}"
            time.sleep(0.2)
        yield url, env
    finally:
        ticker.send_signal(signal.SIGTERM)
        dash.kill()
        ticker.wait(timeout=60)
        dash.wait()
        out = ticker_log.read_text()
        shutil.rmtree(base, ignore_errors=True)
    # A stop at a common tag, as Ctrl-C: the dashboard disturbed nothing.
    assert ticker.returncode == 0, out


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def get_json(url):
    return json.loads(get(url))


def scrape(url):
    families = {f.name: f for f in prometheus.text_string_to_metric_families(get(url + "/metrics"))}
    return families


def value(families, name, **labels):
    """The sample of family `name` with these labels (a counter's sample is `name_total`)."""
    for s in families[name].samples:
        if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {name}{labels} in {families[name].samples}")


def test_metrics_parse_and_their_counters_move(running):
    url, _ = running
    first = scrape(url)
    time.sleep(2.5)  # status files are written once a second
    second = scrape(url)
    for fam in ("hprm_federate_messages_sent", "hprm_federate_messages_received"):
        assert first[fam].type == "counter", first[fam]
    sent = [value(f, "hprm_federate_messages_sent", program="ticker", federate="source") for f in (first, second)]
    got = [value(f, "hprm_federate_messages_received", program="ticker", federate="sink") for f in (first, second)]
    assert sent[1] > sent[0] > 0 and got[1] > got[0] > 0, (sent, got)
    assert value(second, "hprm_program_up", program="ticker") == 1
    # The store's series carry its host (this machine, in a program without hosts).
    assert value(second, "hprm_store_up", program="ticker", host=socket.gethostname()) == 1
    assert value(second, "hprm_store_capacity_bytes", program="ticker") > 0
    # Every loss kind, for every federate, zero ones too.
    kinds = {s.labels["kind"] for s in second["hprm_federate_losses"].samples if s.labels.get("federate") == "sink"}
    assert kinds == {"tardy", "after_last_tag", "undecodable", "unsent", "dropped", "peer_lost", "store_lost"}, kinds
    assert all(s.value == 0 for s in second["hprm_federate_losses"].samples if s.labels.get("program") == "ticker")


def test_a_100_hz_timer_shows_100_messages_a_second(running):
    url, _ = running

    def source():
        snap = get_json(url + "/api/programs")
        return next(f["status"] for p in snap["programs"] for f in p["federates"] if p["name"] == "ticker" and f["name"] == "source")

    a = source()
    time.sleep(4)
    b = source()
    rate = (b["messages_out"] - a["messages_out"]) / ((b["updated_ns"] - a["updated_ns"]) / 1e9)
    assert 90 <= rate <= 110, f"{rate:.1f} messages/s from {a} to {b}"


CONNECTION = "source.source.out -> sink.sink.inp"


def connection_samples(families, name):
    """The samples of family `name` for the ticker's connection, by sample name and `le`."""
    return {(s.name, s.labels.get("le")): s.value for s in families[name].samples if s.labels.get("program") == "ticker" and s.labels.get("connection") == CONNECTION}


def wait_for_change(url, current):
    """Scrapes until the connection's message counter differs from `current`
    (a status file was rewritten): the scrape, and when it was taken."""
    deadline = time.monotonic() + 10
    while True:
        f = scrape(url)
        n = value(f, "hprm_connection_messages", program="ticker", connection=CONNECTION)
        if n != current:
            return f, time.monotonic()
        assert time.monotonic() < deadline, "the connection's counter did not move in 10 s"
        time.sleep(0.02)


def test_a_100_hz_connection_shows_100_messages_a_second_in_metrics(running):
    url, _ = running
    # Between two rewrites of the sink's status file, seen as they happen
    # (within a poll), so the window is the federate's own.
    first, t0 = wait_for_change(url, value(scrape(url), "hprm_connection_messages", program="ticker", connection=CONNECTION))
    n0 = value(first, "hprm_connection_messages", program="ticker", connection=CONNECTION)
    time.sleep(5)
    second, t1 = wait_for_change(url, value(scrape(url), "hprm_connection_messages", program="ticker", connection=CONNECTION))
    n1 = value(second, "hprm_connection_messages", program="ticker", connection=CONNECTION)
    rate = (n1 - n0) / (t1 - t0)
    assert 90 <= rate <= 110, f"{rate:.1f} messages/s ({n1 - n0} in {t1 - t0:.2f} s)"


def test_every_message_is_in_the_latency_histogram(running):
    url, _ = running
    f = scrape(url)
    assert f["hprm_connection_latency_seconds"].type == "histogram"
    lat = connection_samples(f, "hprm_connection_latency_seconds")
    buckets = sorted((float(le), v) for (name, le), v in lat.items() if name.endswith("_bucket"))
    assert len(buckets) == 17 and buckets[-1][0] == float("inf"), buckets
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), f"buckets are cumulative: {buckets}"
    count = lat[("hprm_connection_latency_seconds_count", None)]
    assert buckets[-1][1] == count and lat[("hprm_connection_latency_seconds_sum", None)] > 0
    # Read from one status file: a message counted on arrival whose tag
    # had not started yet is the only one missing from the histogram.
    received = value(f, "hprm_connection_messages", program="ticker", connection=CONNECTION)
    assert 0 <= received - count <= 2, (received, count)
    # And as many as the source sent (its status is written apart from the
    # sink's, up to a second, 100 messages, earlier or later).
    sent = value(f, "hprm_federate_messages_sent", program="ticker", federate="source")
    assert abs(sent - count) <= 200, (sent, count)
    # In-band only: the ticker's values are small.
    assert value(f, "hprm_connection_bytes", program="ticker", connection=CONNECTION, path="in_band") > 0
    assert value(f, "hprm_connection_bytes", program="ticker", connection=CONNECTION, path="store") == 0
    # Reactions ran and are counted: the sink's `add` among its busiest.
    assert value(f, "hprm_federate_reactions", program="ticker", federate="sink") > 0
    assert value(f, "hprm_reaction_runs", program="ticker", federate="sink", reaction="sink.sink.add") > 0
    assert value(f, "hprm_federate_deadline_misses", program="ticker", federate="sink") == 0
    assert value(f, "hprm_federate_restarts", program="ticker", federate="sink") == 0


def test_connection_counters_move_between_scrapes(running):
    url, _ = running
    first = scrape(url)
    second, _ = wait_for_change(url, value(first, "hprm_connection_messages", program="ticker", connection=CONNECTION))
    for name, key in [("hprm_connection_messages", ("hprm_connection_messages_total", None)), ("hprm_connection_latency_seconds", ("hprm_connection_latency_seconds_count", None))]:
        a, b = connection_samples(first, name)[key], connection_samples(second, name)[key]
        assert b > a, (name, a, b)


def test_the_rti_publishes_grants_and_relays(running):
    url, _ = running
    first = scrape(url)
    second, _ = wait_for_change(url, value(first, "hprm_connection_messages", program="ticker", connection=CONNECTION))
    time.sleep(1.1)  # the RTI writes its figures once a second, apart from the federates
    second = scrape(url)
    assert value(second, "hprm_rti_up", program="ticker") == 1
    relayed = [value(f, "hprm_rti_relayed_messages", program="ticker") for f in (first, second)]
    assert relayed[1] > relayed[0] > 0, relayed
    assert second["hprm_rti_grant_latency_seconds"].type == "histogram"
    grants = value(second, "hprm_rti_grants", program="ticker", federate="sink")
    count = next(s.value for s in second["hprm_rti_grant_latency_seconds"].samples if s.name.endswith("_count") and s.labels.get("federate") == "sink")
    assert 0 < count <= grants, (count, grants)
    assert value(second, "hprm_rti_net_seconds", program="ticker", federate="source") > 0


def test_the_timeline_holds_each_run_of_the_last_periods(running):
    url, _ = running

    def sink_adds():
        snap = get_json(url + "/api/programs")
        sink = next(f["status"] for p in snap["programs"] if p["name"] == "ticker" for f in p["federates"] if f["name"] == "sink")
        names = dict(sink["reaction_names"])
        return [r for r in sink["timeline"] if names[r["reaction"]] == "sink.sink.add"]

    # Two periods of a 100 Hz input: about 200 runs, each at its own tag, in
    # order. The status is written once a second: this test may come first,
    # before two periods have gone by (the fixture waits for one message).
    deadline = time.monotonic() + 30
    while len(adds := sink_adds()) < 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 100 <= len(adds) <= 300, len(adds)
    assert all(r["start_ns"] <= r["end_ns"] for r in adds)
    tags = [(r["tag_ns"], r["microstep"]) for r in adds]
    assert tags == sorted(tags) and len(set(tags)) == len(tags), tags[:10]


def test_tags_agree_with_hprm_ps(running):
    url, env = running
    for _ in range(50):
        ps = json.loads(subprocess.run([str(HPRM), "ps", "--json"], env=env, capture_output=True, text=True, check=True).stdout)
        snap = get_json(url + "/api/programs")
        by_ps = {f["name"]: f["status"] for p in ps if p["launch"]["program"] == "ticker" for f in p["federates"]}
        by_dash = {f["name"]: f["status"] for p in snap["programs"] if p["name"] == "ticker" for f in p["federates"]}
        # The same status file read twice: compare when neither changed between.
        if all(by_ps[n]["updated_ns"] == by_dash[n]["updated_ns"] for n in by_ps):
            for n in by_ps:
                assert (by_ps[n]["tag_ns"], by_ps[n]["microstep"]) == (by_dash[n]["tag_ns"], by_dash[n]["microstep"]), n
            return
        time.sleep(0.05)
    raise AssertionError("never read the same status in hprm ps and the dashboard")


def test_events_stream_a_snapshot_then_what_changed_each_second(running):
    url, _ = running
    events = []
    with urllib.request.urlopen(url + "/events", timeout=10) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        while len(events) < 4:
            line = r.readline().decode()
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    # The first whole, the next ones each the delta from the one before.
    assert events[0]["full"] is True and all(e["full"] is False for e in events[1:]), [e.get("full") for e in events]
    assert [e["base"] for e in events[1:]] == [e["seq"] for e in events[:-1]]
    tags = []
    for e in events:
        # A delta lists a status's figures only when they changed.
        status = next(f.get("status") or {} for p in e["programs"] if p["name"] == "ticker" for f in p["federates"] if f["name"] == "source")
        if "tag_ns" in status:
            tags.append(status["tag_ns"])
    assert len(tags) >= 2 and tags == sorted(tags) and tags[0] < tags[-1], tags


def test_it_is_read_only_and_says_what_it_serves(running):
    url, _ = running
    req = urllib.request.Request(url + "/metrics", method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405 and b"read-only" in e.value.read()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/nope", timeout=10)
    assert e.value.code == 404


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is needed (the test command installs it as root)")
def test_the_page_shows_the_program_live_in_a_browser(running, tmp_path_factory):
    url, _ = running
    shot = ROOT / "docs" / "src" / "dashboard.png" if os.environ.get("HPRM_DASHBOARD_SCREENSHOT") else tmp_path_factory.mktemp("shot") / "dashboard.png"

    def dom():
        r = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=2500", "--dump-dom", url + "/?poll"],
            capture_output=True, text=True, timeout=90,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    def tag(page, federate):
        m = re.search(rf'<tr data-federate="{federate}">.*?<td class="tag">([^<]*)</td>', page)
        assert m, page[-3000:]
        return m.group(1)

    page = dom()
    # The program, its graph (a box per federate), its federates' rows and its store.
    assert 'data-program="ticker"' in page, page[-3000:]
    assert page.count('class="federate"') >= 2 and "<svg" in page
    assert '<tr data-federate="source">' in page and '<tr data-federate="sink">' in page
    assert 'class="store"' in page and "in use" in page
    # The connection's arrow, annotated with its rate and latency.
    m = re.search(r'<text class="edge" data-from="source" data-to="sink"[^>]*>(\d+) msg/s', page)
    assert m and 50 <= int(m.group(1)) <= 150, page[-3000:]
    assert re.search(r"p50 [\d.]+ (µs|ms|s) · p99 [\d.]+ (µs|ms|s)", page), page[-3000:]
    assert 'class="timeline"' in page and re.search(r"<title>sink\.sink\.add at tag [^<]*, ran ", page), page[-3000:]
    assert 'class="rti"' in page and "relayed" in page
    first = tag(page, "source")
    time.sleep(2)
    assert tag(dom(), "source") != first, "the tag shown moves as the program runs"
    r = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1250", "--virtual-time-budget=2500", f"--screenshot={shot}", url + "/?poll"],
        capture_output=True, text=True, timeout=90,
    )
    assert r.returncode == 0 and shot.stat().st_size > 10_000, r.stderr[-2000:]


class DevTools:
    """Headless Chromium driven over the DevTools protocol, in real time: a
    page following /events never finishes loading, so --dump-dom's
    virtual time (which waits for every open request) cannot show it."""

    def __init__(self, profile):
        client = pytest.importorskip("websockets.sync.client", reason="pip install websockets (install.sh does)")
        self.chrome = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"], stderr=subprocess.PIPE, text=True)
        try:
            self.connect(client)
        except BaseException:
            self.chrome.kill()
            self.chrome.wait()
            raise

    def connect(self, client):
        ws_url = None
        for line in self.chrome.stderr:
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
                break
        assert ws_url, "chromium did not say where its DevTools listen"
        # Its log goes on: drained, so that it never waits on a full pipe.
        threading.Thread(target=self.chrome.stderr.read, daemon=True).start()
        port = re.search(r":(\d+)/", ws_url).group(1)
        targets = get_json(f"http://127.0.0.1:{port}/json/list")
        page = next(t for t in targets if t["type"] == "page")
        self.connection = contextlib.ExitStack()
        self.ws = self.connection.enter_context(client.connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30))
        self.n = 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            r = json.loads(self.ws.recv(timeout=30))
            if r.get("id") == self.n:
                assert "error" not in r, r
                return r["result"]

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def close(self):
        self.connection.close()
        self.chrome.terminate()
        self.chrome.wait(timeout=30)


def tag_seconds(title):
    """The tag of a timeline mark's title (`sink.sink.add at tag 1.23 s (0), ran 12 µs`), in seconds."""
    m = re.search(r" at tag ([\d.]+) (s|ms) ", title)
    assert m, title
    return float(m.group(1)) / (1 if m.group(2) == "s" else 1000)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is needed (the test command installs it as root)")
def test_the_page_follows_events_and_draws_its_timeline_from_the_deltas(running, tmp_path):
    """The page as a person opens it, following /events: a whole read
    first (its federates' last two periods of runs), then each second only
    the runs that are new. Its timeline keeps drawing: after four deltas it
    shows more of the sink's runs, over a longer stretch than the whole
    read held, each run once."""
    url, _ = running
    browser = DevTools(tmp_path / "profile")
    marks = "[document.getElementById('state').dataset.seq, [...document.querySelectorAll('svg.timeline rect title')].map(t => t.textContent).filter(t => t.startsWith('sink.sink.add at tag '))]"
    try:
        browser.call("Page.navigate", url=url + "/")
        deadline = time.monotonic() + 30
        while True:
            seq, first = browser.evaluate(marks) or ("", [])
            if seq and first:
                break
            assert time.monotonic() < deadline, "the page drew no timeline from /events within 30 s"
            time.sleep(0.1)
        while True:
            now, later = browser.evaluate(marks)
            if int(now) >= int(seq) + 4:
                break
            assert time.monotonic() < deadline + 30, f"the page stayed at read {now} (from {seq})"
            time.sleep(0.2)
    finally:
        browser.close()
    assert len(set(later)) == len(later), "a run drawn twice"

    def span(titles):
        return max(map(tag_seconds, titles)) - min(map(tag_seconds, titles))

    # Four reads later, at least three more status periods of runs (100 a second) were appended.
    assert len(later) >= len(first) + 200, (len(first), len(later))
    assert span(later) >= span(first) + 2, (span(first), span(later))


def test_launch_serves_a_dashboard_with_its_program(daemons_built):
    base = tempfile.mkdtemp(prefix="hdash", dir="/tmp")
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=base)
    p = subprocess.Popen([str(HPRM), "launch", "--dashboard=127.0.0.1:0", str(HERE / "programs" / "ticker.py"), "500"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"http://(127\.0\.0\.1:\d+)/", p.stdout.readline())
        assert m, p.stderr.read()
        deadline = time.monotonic() + 60
        while value_or_none(f"http://{m.group(1)}", "ticker") is None:
            assert time.monotonic() < deadline, "the launch's dashboard never showed its program"
            time.sleep(0.2)
        assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        p.kill()
        shutil.rmtree(base, ignore_errors=True)


def value_or_none(url, program):
    try:
        return value(scrape(url), "hprm_program_up", program=program)
    except (AssertionError, KeyError, urllib.error.URLError):
        return None
