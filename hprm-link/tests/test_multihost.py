"""A program spanning two hosts, each a network namespace of this machine
joined to the other by a veth pair (hprm-link/netns.sh): each host runs
its own hprm-store, hprm-link and federates (`hprm launch --host NAME`),
the RTI on host a. The values (1, 10 and 50 MB arrays, a nested dict of
arrays) reach the receivers on host b bit-exact, through b's store; the
receivers print the same trace as when the whole program runs on one host;
nothing is left behind. A link cut in the middle of a run (the veth set
down) is noticed by name on both hosts within a bound, the receiver that
lost the RTI fails and is restarted, and traffic resumes once the link is
back.

Needs root and `ip` (skips saying why otherwise), the hprm SDK in the
running Python (hprm-py/install.sh) and hprm-link on PATH or in
$HPRM_LINK_BIN_DIR (hprm-link/test.sh sets it).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NETNS = HERE.parent / "netns.sh"
PROGRAM = HERE / "multihost"
WITHIN = 120
# How close clock synchronization must come to a skew of 300 ms (over a
# veth, its round trips take well under a millisecond).
CLOCK_TOLERANCE_NS = 50_000_000

sys.path.insert(0, str(PROGRAM))
from reactors import ECHO_ROUNDS, ECHO_SIZE, SIZES, digest, echo_value, value, worked  # noqa: E402


def _why_no_namespaces():
    r = subprocess.run([str(NETNS), "check"], capture_output=True, text=True)
    return None if r.returncode == 0 else r.stdout.strip() or r.stderr.strip()


def _hprm():
    exe = shutil.which("hprm", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip(f"no hprm command next to {sys.executable}: install the SDK with hprm-py/install.sh")
    return exe


def _env(tmp_path):
    """The environment of every share: hprm-link on PATH, and the program's
    HMAC key (on by default between hosts), the same for both hosts."""
    env = dict(os.environ)
    key = tmp_path / "auth.key"
    key.write_text("a shared secret of the test\n")
    env["HPRM_AUTH_KEY_FILE"] = str(key)
    env.pop("HPRM_AUTH", None)
    link_dir = os.environ.get("HPRM_LINK_BIN_DIR")
    if link_dir:
        env["PATH"] = f"{env.get('PATH', '')}:{link_dir}"
    env.setdefault("RUST_LOG", "info,zenoh=warn")
    env["NO_COLOR"] = "1"
    return env


def _shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture
def hosts():
    why = _why_no_namespaces()
    if why:
        pytest.skip(f"cannot make network namespaces: {why}")
    prefix = f"hp{os.getpid() % 100000}"
    subnet = f"10.213.{os.getpid() % 250}"
    subprocess.run([str(NETNS), "down", prefix], check=False)
    subprocess.run([str(NETNS), "up", prefix, subnet], check=True)
    try:
        yield prefix, f"{subnet}.1", f"{subnet}.2"
    finally:
        subprocess.run([str(NETNS), "down", prefix], check=False)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in left, f"namespaces left behind: {left}"


def _manifest(tmp_path, a, b, name="values"):
    text = (PROGRAM / f"{name}.toml").read_text().replace("@A@", a).replace("@B@", b)
    shutil.copy(PROGRAM / "reactors.py", tmp_path / "reactors.py")
    multi = tmp_path / f"{name}.toml"
    multi.write_text(text)
    # The same program on one host: no [[host]] tables, no federate hosts.
    single = re.sub(r"\[\[host\]\]\nname = .*\naddress = .*\n", "", text)
    single = re.sub(r'(?m)^(host = ".*"|hosts = \[.*\]|rti_host = ".*")\n', "", single)
    one = tmp_path / f"{name}-one-host.toml"
    one.write_text(single)
    return multi, one


def _nbytes(v):
    if hasattr(v, "nbytes"):
        return v.nbytes
    if isinstance(v, dict):
        return sum(_nbytes(x) for x in v.values())
    if isinstance(v, list | tuple):
        return sum(_nbytes(x) for x in v)
    return 0


def _rx_bytes(prefix, host):
    """Bytes host's end of the veth pair received so far."""
    path = f"/sys/class/net/{prefix}-v{host}/statistics/rx_bytes"
    r = subprocess.run(["ip", "netns", "exec", f"{prefix}-{host}", "cat", path], capture_output=True, text=True, check=True)
    return int(r.stdout)


def _tx_bytes(prefix, host):
    """Bytes host's end of the veth pair sent so far."""
    path = f"/sys/class/net/{prefix}-v{host}/statistics/tx_bytes"
    r = subprocess.run(["ip", "netns", "exec", f"{prefix}-{host}", "cat", path], capture_output=True, text=True, check=True)
    return int(r.stdout)


def _trace(out):
    return sorted(line for line in out.splitlines() if "RECV " in line and "sha=" in line)


def _strip(line):
    return line[line.index("RECV ") :]


def _launch_both(prefix, argv, env, extra_env=None, extra_args=None):
    """Runs `hprm launch --host H ...` for hosts b then a, each in its
    namespace (with `extra_env[H]` added to `env` and `extra_args[H]` to
    its flags), to their end; their outputs by host (a share that hangs is
    killed, with its process group, after WITHIN)."""
    extra_env = extra_env or {}
    extra_args = extra_args or {}
    procs = {
        host: subprocess.Popen(
            ["ip", "netns", "exec", f"{prefix}-{host}", argv[0], "launch", "--host", host, *extra_args.get(host, []), *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, **extra_env.get(host, {})},
            start_new_session=True,
        )
        for host in ("b", "a")
    }
    outs = {}
    try:
        for host, p in procs.items():
            outs[host], _ = p.communicate(timeout=WITHIN)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for host, p in procs.items():
        assert p.returncode == 0, f"host {host}'s share failed ({p.returncode}):\n{outs[host]}"
    return outs


def test_a_program_across_two_hosts_gives_the_values_bit_exact_and_the_one_host_trace(hosts, tmp_path):
    hprm = _hprm()
    prefix, a, b = hosts
    multi, one = _manifest(tmp_path, a, b)
    shm_before = _shm()
    env = _env(tmp_path)

    rx_before = _rx_bytes(prefix, "b")
    outs = _launch_both(prefix, [hprm, str(multi)], env)

    expected = [digest(value(k)) for k in range(len(SIZES) + 1)]
    got = {}
    for line in _trace(outs["a"] + outs["b"]):
        m = re.search(r"RECV (\w+) t=(\d+) sha=(\w+)", line)
        got.setdefault(m.group(1), []).append((int(m.group(2)), m.group(3)))
    for name in ("left", "right", "near"):
        seen = sorted(got.get(name, []))
        assert [s for _, s in seen] == expected, f"{name} got {seen}, expected {expected}:\n{outs['a']}\n{outs['b']}"
    # Host b's two receivers read each value from b's store: one transfer
    # from a to b per value (not one per receiver), as b's veth counted.
    payload = sum(_nbytes(value(k)) for k in range(len(SIZES) + 1))
    received = _rx_bytes(prefix, "b") - rx_before
    assert payload <= received < 1.3 * payload, f"{received} bytes reached host b for {payload} bytes of values"

    single = subprocess.run([hprm, "launch", str(one)], capture_output=True, text=True, env=env, timeout=WITHIN)
    assert single.returncode == 0, single.stdout + single.stderr
    one_host = sorted(_strip(line) for line in _trace(single.stdout + single.stderr))
    two_hosts = sorted(_strip(line) for line in _trace(outs["a"] + outs["b"]))
    assert len(two_hosts) == 3 * (len(SIZES) + 1), two_hosts
    assert two_hosts == one_host, f"traces differ:\n{two_hosts}\n{one_host}"

    assert _shm() == shm_before, f"left in /dev/shm: {_shm() - shm_before}"
    for host in ("a", "b"):
        pids = subprocess.run(["ip", "netns", "pids", f"{prefix}-{host}"], capture_output=True, text=True).stdout.split()
        assert not pids, f"processes left in host {host}'s namespace: {pids}"


def test_an_echo_back_to_the_home_host_moves_its_data_once(hosts, tmp_path):
    """echo.toml: a source on host a sends 10 MiB arrays to two echoers on
    host b, which send each back, as received, to a receiver on host a.
    Each array crosses from a to b once (one copy for both echoers), and
    nothing of it comes back: host a still holds its copy while b holds
    one, so b's link only announces the echoes (veth byte counters). With
    the home copy freed as soon as b had its own (before this change), 42
    of the 31 MB came back: once or twice per round."""
    hprm = _hprm()
    prefix, a, b = hosts
    multi, _ = _manifest(tmp_path, a, b, "echo")
    env = _env(tmp_path)
    sent_a, sent_b = _tx_bytes(prefix, "a"), _tx_bytes(prefix, "b")
    outs = _launch_both(prefix, [hprm, str(multi)], env)
    a_to_b, b_to_a = _tx_bytes(prefix, "a") - sent_a, _tx_bytes(prefix, "b") - sent_b

    expected = sorted(digest(echo_value(k)) for k in range(ECHO_ROUNDS) for _ in range(2))
    got = sorted(line.split("sha=")[1] for line in outs["a"].splitlines() if "BACK back" in line and "sha=" in line)
    assert got == expected, f"echoes received on host a:\n{outs['a']}\n{outs['b']}"
    payload = ECHO_ROUNDS * ECHO_SIZE
    print(f"echo of {ECHO_ROUNDS} x {ECHO_SIZE} bytes: {a_to_b} bytes a->b, {b_to_a} bytes b->a")
    assert payload <= a_to_b < 1.3 * payload, f"{a_to_b} bytes went from a to b for {payload} bytes of arrays"
    # The RTI's and the links' small messages only (tags, announces, status).
    assert b_to_a < ECHO_SIZE / 10, f"{b_to_a} bytes came back from b to a for {ECHO_ROUNDS} echoed arrays of {ECHO_SIZE} bytes:\n{outs['b']}"
    # Host a kept each home copy until b said its copy was freed, then
    # released it (its link's counters, logged as it stops): nothing pinned.
    assert f"returned={ECHO_ROUNDS} reclaimed=0" in outs["a"], outs["a"]


def test_a_python_program_names_its_hosts_too(hosts, tmp_path):
    hprm = _hprm()
    prefix, a, b = hosts
    for f in ("reactors.py", "values.py"):
        shutil.copy(PROGRAM / f, tmp_path / f)
    env = _env(tmp_path)

    outs = _launch_both(prefix, [hprm, str(tmp_path / "values.py"), a, b], env)
    expected = [digest(value(k)) for k in range(len(SIZES) + 1)]
    for name, host in [("left", "b"), ("right", "b"), ("near", "a")]:
        got = [line.split("sha=")[1] for line in _trace(outs[host]) if f"RECV {name} " in line]
        assert sorted(got) == sorted(expected), f"{name} on host {host}:\n{outs[host]}"


def test_a_bank_spread_over_two_hosts_gives_the_one_host_trace(hosts, tmp_path):
    """bank.toml: workers 0 and 2 on host a, 1 and 3 on host b (round
    robin), each getting the source's arrays from a and sending its own to
    the gatherer on b; then the same bank written in Python."""
    hprm = _hprm()
    prefix, a, b = hosts
    multi, one = _manifest(tmp_path, a, b, "bank")
    shutil.copy(PROGRAM / "bank.py", tmp_path / "bank.py")
    env = _env(tmp_path)

    # Host b's clock is 300 ms behind (test-only skew): clock
    # synchronization, on by default between hosts, measures it at join
    # and corrects physical time; tags are the one-host run's.
    skew = -300_000_000
    traces = {h: tmp_path / f"trace-{h}.json" for h in ("a", "b")}
    outs = _launch_both(
        prefix, [hprm, str(multi)], env, {"b": {"HPRM_TEST_CLOCK_SKEW_NS": str(skew)}}, {h: ["--trace", str(t)] for h, t in traces.items()}
    )
    offsets = {h: [int(x) for x in re.findall(r"clock synchronized with the RTI.*offset_ns=(-?\d+)", outs[h])] for h in ("a", "b")}
    assert len(offsets["b"]) == 3 and len(offsets["a"]) == 3, offsets  # gather, worker[1], worker[3]; source, worker[0], worker[2]
    for h, want in [("a", 0), ("b", -skew)]:
        assert all(abs(o - want) < CLOCK_TOLERANCE_NS for o in offsets[h]), f"host {h}: offsets {offsets[h]}, expected {want}"
    errors = [int(x) for x in re.findall(r"CLOCK worker\[\d\] err_ns=(-?\d+)", outs["b"])]
    print(f"clock offsets measured on host b: {[o + skew for o in offsets['b']]} ns off the skew; physical time off by {errors} ns")
    assert len(errors) == 4 and all(abs(e) < CLOCK_TOLERANCE_NS for e in errors), f"physical time off by {errors} ns on host b"
    # Each host's trace is on the RTI's clock too: host b's reactions at
    # the start tag, which follow host a's source, start after it (b's own
    # clock would put them 300 ms before).
    first = {h: _first_reaction_ns(t) for h, t in traces.items()}
    assert first["b"] - first["a"] > -CLOCK_TOLERANCE_NS, f"trace of host b is {first['a'] - first['b']} ns ahead of host a's"
    sent = [value(k) for k in range(2)]
    for member, host in [(0, "a"), (1, "b"), (2, "a"), (3, "b")]:
        got = [line.split("sha=")[1] for line in _trace(outs[host]) if f"RECV worker[{member}] " in line]
        assert got == [digest(v) for v in sent], f"worker[{member}] on host {host}:\n{outs[host]}"
        got = [line.split("sha=")[1] for line in _trace(outs["b"]) if f"RECV gather[{member}] " in line]
        assert sorted(got) == sorted(digest(worked(v, member)) for v in sent), f"gather[{member}]:\n{outs['b']}"
    two_hosts = sorted(_strip(line) for line in _trace(outs["a"] + outs["b"]))
    assert len(two_hosts) == 2 * 8, two_hosts

    single = subprocess.run([hprm, "launch", str(one)], capture_output=True, text=True, env=env, timeout=WITHIN)
    assert single.returncode == 0, single.stdout + single.stderr
    one_host = sorted(_strip(line) for line in _trace(single.stdout + single.stderr))
    assert two_hosts == one_host, f"traces differ:\n{two_hosts}\n{one_host}"

    outs = _launch_both(prefix, [hprm, str(tmp_path / "bank.py"), a, b], env)
    for member, host in [(0, "a"), (1, "b"), (2, "a"), (3, "b")]:
        assert any(f"RECV worker[{member}] " in line for line in _trace(outs[host])), f"worker[{member}] not on host {host}:\n{outs[host]}"
    assert sorted(_strip(line) for line in _trace(outs["a"] + outs["b"])) == one_host


def _first_reaction_ns(path):
    """The physical start (ns since the epoch) of the earliest reaction at
    the start tag in a merged Chrome trace."""
    trace = json.loads(path.read_text())
    epoch = trace["otherData"]["hprm_epoch_ns"]
    starts = [e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("args", {}).get("tag_ns") == 0]
    assert starts, f"no reaction at the start tag in {path}"
    return epoch + int(min(starts) * 1000)


def test_launching_a_program_with_hosts_without_host_says_how(tmp_path):
    hprm = _hprm()
    multi, _ = _manifest(tmp_path, "10.1.0.1", "10.1.0.2")
    r = subprocess.run([hprm, "launch", str(multi)], capture_output=True, text=True, env=_env(tmp_path), timeout=WITHIN)
    assert r.returncode != 0
    assert "runs on several hosts (a, b)" in r.stderr and "--host NAME" in r.stderr, r.stderr
    r = subprocess.run([hprm, "launch", "--host", "c", str(multi)], capture_output=True, text=True, env=_env(tmp_path), timeout=WITHIN)
    assert r.returncode != 0 and "no such host; its hosts are a, b" in r.stderr, r.stderr
    # Between hosts the RTI authenticates federates: a share without the key is refused, saying how.
    env = _env(tmp_path)
    del env["HPRM_AUTH_KEY_FILE"]
    r = subprocess.run([hprm, "launch", "--host", "a", str(multi)], capture_output=True, text=True, env=env, timeout=WITHIN)
    assert r.returncode != 0 and "only with HMAC authentication: set HPRM_AUTH_KEY_FILE" in r.stderr, r.stderr


def _wait_for(what, cond, within=WITHIN):
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.02)
    return time.monotonic()


def _ps_shows_every_host(hprm, prefix, env):
    """`hprm ps --json` in each namespace: each host's launcher lists its
    own federates (with the clock offset synchronization measured) and the
    other host's, as that host reports them through the links: its host,
    its pid there, a tag that moves; host a runs the RTI, so it shows b's
    receiver as the RTI sees it too (joined). Returns host a's runtime
    directory (the namespaces share /tmp, so each host's `hprm ps` lists
    both shares: each is told apart by its host)."""

    def shares(host):
        r = subprocess.run(["ip", "netns", "exec", f"{prefix}-{host}", hprm, "ps", "--json"], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        return {p["launch"]["hosts"]["host"]: p for p in json.loads(r.stdout) if p["launch"]["program"] == "cut" and p["launch"].get("hosts")}

    def joined():
        time.sleep(0.2)
        a = shares("a").get("a")
        return a is not None and any(f["name"] == "sink" and f["host"] == "b" and (f["rti"] or {}).get("connected") for f in a["elsewhere"])

    _wait_for("host a's hprm ps shows the receiver on host b joined", joined, within=10)
    b_pids = {int(p) for p in subprocess.run(["ip", "netns", "pids", f"{prefix}-b"], capture_output=True, text=True).stdout.split()}
    tags = {"a": [], "b": []}

    def moving():
        time.sleep(0.2)
        for here, there, name in [("a", "b", "sink"), ("b", "a", "source")]:
            (f,) = [f for f in shares(here)[here]["elsewhere"] if f["name"] == name]
            assert f["host"] == there, f
            if f["status"] is not None:
                assert f["status"]["federate"] == name and f["pid"] == f["status"]["pid"] > 0, f
                tags[here].append(f["status"]["tag_ns"])
        return all(t and t[-1] > t[0] for t in tags.values())

    _wait_for("each host's hprm ps shows the other host's federate with a moving tag", moving, within=15)
    a = shares("a")["a"]
    (sink,) = [f for f in a["elsewhere"] if f["name"] == "sink"]
    assert sink["pid"] in b_pids, f"host a shows the receiver's pid {sink['pid']}, not a process of host b ({sorted(b_pids)})"
    assert [(f["name"], f["host"]) for f in a["federates"]] == [("source", "a")], a
    b = shares("b")["b"]
    assert [(f["name"], f["host"], f["rti"]) for f in b["elsewhere"]] == [("source", "a", None)], b
    assert [f["name"] for f in b["federates"]] == ["sink"], b
    status = b["federates"][0]["status"]
    assert status is not None and abs(status["clock_offset_ns"]) < CLOCK_TOLERANCE_NS, status
    table = subprocess.run(["ip", "netns", "exec", f"{prefix}-a", hprm, "ps"], capture_output=True, text=True, env=env, timeout=30).stdout
    # FEDERATE HOST FED-PID TAG: b's receiver with its pid there and a tag.
    assert re.search(r"^\s+sink\s+b\s+\d+ \(joined\)\s+\d", table, re.M), table
    assert "this is host a; 1 federate on other hosts (1 reporting through hprm-link" in table, table
    # Under the table, host b's store with the figures b's link reported (b's receiver reads from it).
    assert re.search(r"^cut: store on host b: pid \d+: [\d.]+ (B|KiB|MiB) in use of [\d.]+ (MiB|GiB), \d+ objects \(\d+ held, \d+ deliveries pending\), \d+ evictions, 0 creates refused for room, 0 over quota$", table, re.M), table
    print(f"host a's hprm ps saw the receiver on host b at tags {tags['a']} ns")
    return Path(a["launch"]["runtime_dir"])


def _dashboard_on_b_shows_host_as_store_and_the_rti(hprm, prefix, env):
    """`hprm dashboard` on host b shows host a's store (its figures as a's
    link reports them, labelled host="a" in /metrics) beside b's own, and
    the RTI's figures although the RTI runs on host a. The namespaces share
    /tmp, where a dashboard would also find host a's share itself: this one
    reads a directory holding only host b's share (a link to its runtime
    directory), so what it shows of host a came through the links."""
    r = _in(prefix, "b", hprm, "ps", "--json", env=env)
    (runtime_b,) = [p["launch"]["runtime_dir"] for p in json.loads(r.stdout) if p["launch"]["program"] == "cut" and (p["launch"].get("hosts") or {}).get("host") == "b"]
    base = Path(tempfile.mkdtemp(prefix="hprm-dash-b-"))
    (base / Path(runtime_b).name).symlink_to(runtime_b)
    dash = subprocess.Popen(
        ["ip", "netns", "exec", f"{prefix}-b", hprm, "dashboard", "--listen", "127.0.0.1:0", "--runtime-base", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        first = dash.stdout.readline()
        m = re.search(r"http://([\d.:]+)/", first)
        assert m, first
        fetch = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
        get = lambda path: _in(prefix, "b", sys.executable, "-c", fetch, f"http://{m.group(1)}{path}").stdout  # noqa: E731
        seen = {}

        def shown():
            time.sleep(0.2)
            (p,) = [p for p in json.loads(get("/api/programs"))["programs"] if p["name"] == "cut"]
            seen["program"] = p
            others = {st["host"]: st for st in p["other_stores"]}
            return (p["store"] or {}).get("host") == "b" and (others.get("a") or {}).get("stats") is not None and p["rti_figures"] is not None

        _wait_for("host b's dashboard shows host a's store and the RTI", shown, within=15)
        p = seen["program"]
        assert p["rti"] is None and p["rti_host"] == "a", p
        assert p["store"]["stats"] is not None, p["store"]
        (store_a,) = [st for st in p["other_stores"] if st["host"] == "a"]
        assert store_a["stats"]["capacity"] > 0 and store_a["pid"] > 0, store_a
        assert store_a["pid"] != p["store"]["pid"], (store_a, p["store"])
        # The RTI numbers the program's federates: source (on a), sink (on b).
        assert p["rti_figures"]["names"] == ["source", "sink"], p["rti_figures"]
        assert [f["id"] for f in p["rti_figures"]["federates"]] == [0, 1], p["rti_figures"]
        metrics = get("/metrics")
        for host in ("a", "b"):
            m = re.search(rf'^hprm_store_capacity_bytes\{{program="cut",host="{host}"\}} (\d+)$', metrics, re.M)
            assert m and int(m.group(1)) > 0, f"no store capacity of host {host}:\n{metrics}"
            assert f'hprm_store_up{{program="cut",host="{host}"}} 1' in metrics, metrics
        assert 'hprm_rti_up{program="cut"} 1' in metrics, metrics
        assert re.search(r'^hprm_rti_grants_total\{program="cut",federate="sink"\} \d+$', metrics, re.M), metrics
        print(f"host b's dashboard showed host a's store: {store_a['stats']}")
    finally:
        os.killpg(dash.pid, signal.SIGKILL)
        dash.wait()
        shutil.rmtree(base)


def _start_both(prefix, hprm, program, env):
    """Starts each host's share of `program` in its namespace (b first) and
    gathers each one's output line by line as it comes: (processes, lines),
    both by host."""
    lines = {"a": [], "b": []}
    procs = {}
    for host in ("b", "a"):
        p = subprocess.Popen(
            ["ip", "netns", "exec", f"{prefix}-{host}", hprm, "launch", "--host", host, str(program)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=lambda p=p, out=lines[host]: out.extend(p.stdout), daemon=True).start()
        procs[host] = p
    return procs, lines


def test_the_dashboard_on_one_host_shows_the_other_hosts_store_and_the_rti(hosts, tmp_path):
    """The cut program, left running (no cut) until the dashboard of host b
    showed host a's store and the RTI, then stopped (SIGTERM, as a person's
    Ctrl-C would): nothing is left behind."""
    hprm = _hprm()
    prefix, a, b = hosts
    shutil.copy(PROGRAM / "reactors.py", tmp_path / "reactors.py")
    program = tmp_path / "cut.toml"
    text = (PROGRAM / "cut.toml").read_text().replace("@A@", a).replace("@B@", b)
    # Long enough for any machine to get through the checks: stopped after them.
    program.write_text(text.replace('timeout = "9s"', 'timeout = "300s"'))
    env = _env(tmp_path)
    procs, lines = _start_both(prefix, hprm, program, env)
    try:
        _wait_for("the first array on host b", lambda: any("GOT " in line for line in lines["b"]))
        _dashboard_on_b_shows_host_as_store_and_the_rti(hprm, prefix, env)
        for host in ("b", "a"):
            procs[host].send_signal(signal.SIGTERM)
            procs[host].wait(timeout=WITHIN)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for host in ("a", "b"):
        r = _in(prefix, host, hprm, "ps", "--json", env=env)
        assert not [p for p in json.loads(r.stdout) if p["launch"]["program"] == "cut"], r.stdout


def test_a_link_cut_mid_run_is_noticed_by_name_and_traffic_resumes_when_it_is_back(hosts, tmp_path):
    hprm = _hprm()
    prefix, a, b = hosts
    shutil.copy(PROGRAM / "reactors.py", tmp_path / "reactors.py")
    program = tmp_path / "cut.toml"
    program.write_text((PROGRAM / "cut.toml").read_text().replace("@A@", a).replace("@B@", b))
    shm_before = _shm()
    env = _env(tmp_path)
    procs, lines = _start_both(prefix, hprm, program, env)
    said = lambda host, text: any(text in line for line in lines[host])  # noqa: E731
    dump = lambda: "\n--- host a:\n" + "".join(lines["a"]) + "\n--- host b:\n" + "".join(lines["b"])  # noqa: E731
    try:
        _wait_for("the first array on host b", lambda: said("b", "GOT "))
        runtime_a = _ps_shows_every_host(hprm, prefix, env)
        ip_link = ["ip", "-n", f"{prefix}-a", "link", "set", f"{prefix}-va"]
        subprocess.run([*ip_link, "down"], check=True)
        cut = time.monotonic()
        got_before = sum("GOT " in line for line in lines["b"])
        try:
            # Each side names what it lost, within the host timeout (500 ms)
            # plus TCP's keepalive second; asserted generously.
            lost_a = _wait_for("host a loses host b", lambda: said("a", "lost host b")) - cut
            lost_b = _wait_for("host b loses host a", lambda: said("b", "lost host a")) - cut
            rti = _wait_for("the receiver loses the RTI", lambda: said("b", "the RTI's host stopped answering for 500ms")) - cut
            print(f"link cut noticed after: host a's link {lost_a:.2f} s, host b's {lost_b:.2f} s, the RTI's loss {rti:.2f} s")
            assert max(lost_a, lost_b, rti) < 10, f"noticed after {lost_a:.1f}, {lost_b:.1f}, {rti:.1f} s"
            time.sleep(max(0.0, cut + 2.5 - time.monotonic()))
        finally:
            subprocess.run([*ip_link, "up"], check=True)
        back = len(lines["b"])
        for p in procs.values():
            p.wait(timeout=WITHIN)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    out = dump()
    # Host a went on; host b restarted its receiver, which rejoined.
    for host, p in procs.items():
        assert p.returncode == 0, f"host {host}'s share failed ({p.returncode}):{out}"
    assert said("b", "restarting it (1 of 3 restarts)"), out
    assert said("a", "host b is back") and said("b", "host a is back"), out
    after = [line for line in lines["b"][back:] if "GOT " in line]
    assert after, f"no array reached host b after the link came back:{out}"
    assert got_before > 0 and not said("b", " BAD"), out
    # The mirrors went with the program: host a's runtime directory (where
    # its link mirrored host b's federates) is gone, and no `hprm ps` lists them.
    assert not runtime_a.exists(), f"left behind: {sorted(os.listdir(runtime_a))}"
    for host in ("a", "b"):
        r = _in(prefix, host, hprm, "ps", "--json")
        assert not [p for p in json.loads(r.stdout) if p["launch"]["program"] == "cut"], r.stdout
    assert _shm() == shm_before, f"left in /dev/shm: {_shm() - shm_before}"
    for host in ("a", "b"):
        pids = subprocess.run(["ip", "netns", "pids", f"{prefix}-{host}"], capture_output=True, text=True).stdout.split()
        assert not pids, f"processes left in host {host}'s namespace: {pids}"


def _in(prefix, host, *argv, check=True, env=None):
    return subprocess.run(["ip", "netns", "exec", f"{prefix}-{host}", *argv], capture_output=True, text=True, check=check, env=env)


def test_values_cross_a_1gbit_link_that_drops_half_a_percent_bit_exact(hosts, tmp_path):
    """The link shaped as a robot's Ethernet: 1 Gbit/s (tbf; this kernel has
    no netem) on both ends, and 0.5% of the packets each host receives
    dropped by an nftables rule. TCP retransmits under Zenoh: every value
    still arrives bit-exact."""
    hprm = _hprm()
    if shutil.which("nft") is None:
        pytest.skip("no nft command: install Debian's nftables (apt-get install nftables; hprm-link/test.sh does, as root)")
    prefix, a, b = hosts
    rule = "table inet hprmdrop { chain input { type filter hook input priority 0; policy accept; numgen random mod 1000 < 5 counter drop; }; }"
    for h in "ab":
        _in(prefix, h, "tc", "qdisc", "add", "dev", f"{prefix}-v{h}", "root", "tbf", "rate", "1gbit", "burst", "128kb", "latency", "50ms")
        _in(prefix, h, "nft", rule)
    multi, _ = _manifest(tmp_path, a, b)
    env = _env(tmp_path)
    # What this test checks is delivery under loss, not the detection of a
    # lost host: a tail segment dropped twice waits 200 + 400 ms for its
    # retransmissions, past the default 500 ms host timeout, and the host
    # would be declared lost (it failed so once, on a loaded machine).
    env["HPRM_HOST_TIMEOUT"] = "5s"
    outs = _launch_both(prefix, [hprm, str(multi)], env)

    expected = [digest(value(k)) for k in range(len(SIZES) + 1)]
    for name, host in [("left", "b"), ("right", "b"), ("near", "a")]:
        got = [line.split("sha=")[1] for line in _trace(outs[host]) if f"RECV {name} " in line]
        assert got == expected, f"{name} on host {host}:\n{outs[host]}"
    # The rule did drop packets (the values crossed a lossy link).
    dropped = 0
    for h in "ab":
        listed = _in(prefix, h, "nft", "list", "table", "inet", "hprmdrop").stdout
        dropped += int(re.search(r"counter packets (\d+)", listed).group(1))
        assert "tbf" in _in(prefix, h, "tc", "qdisc", "show", "dev", f"{prefix}-v{h}").stdout
    assert dropped > 0, "the nftables rule dropped no packet"


def _tardy_run(prefix, a, b, stp, tmp_path, env):
    """Runs tardy.py across the hosts with this STP; host b's receiver's
    on-time and tardy values and its exit line."""
    shutil.copy(PROGRAM / "tardy.py", tmp_path / "tardy.py")
    outs = _launch_both(prefix, [_hprm(), str(tmp_path / "tardy.py"), a, b, stp], env)
    lines = outs["b"].splitlines()
    on_time = [int(line.split("ON TIME ")[1]) for line in lines if "ON TIME " in line]
    tardy = [int(line.split("TARDY ")[1]) for line in lines if "TARDY " in line]
    done = [line for line in lines if line.startswith("[receiver]") and ("messages lost" in line or "no messages lost or late" in line)]
    assert len(done) == 1, outs["b"]
    return on_time, tardy, done[0], outs["b"]


def test_decentralized_across_hosts_an_stp_that_covers_the_link_has_nothing_tardy_a_smaller_one_runs_the_tardy_handler(hosts, tmp_path):
    prefix, a, b = hosts
    env = _env(tmp_path)
    on_time, tardy, done, out = _tardy_run(prefix, a, b, "300ms", tmp_path, env)
    assert tardy == [] and len(on_time) >= 5, out
    assert on_time == list(range(1, len(on_time) + 1)), out
    assert "no messages lost or late" in done, done

    on_time, tardy, done, out = _tardy_run(prefix, a, b, "0ms", tmp_path, env)
    assert tardy, f"nothing tardy with an STP of 0:\n{out}"
    # Every value came, on time or late, once; the exit line counts the late ones.
    assert sorted(on_time + tardy) == list(range(1, len(on_time) + len(tardy) + 1)), out
    assert f"{len(tardy)} late: receiver." in done and f".inp: {len(tardy)} tardy" in done, done
    print(f"decentralized across hosts, STP 0: {len(tardy)} of {len(on_time) + len(tardy)} messages tardy, the tardy handler ran for each")


def _recorded_messages(path):
    """(topic, log_time, sequence, data) of every message of the recording
    `path`, in file order, and its metadata by name, read with the public
    `mcap` package."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        reader = make_reader(f)
        messages = [(c.topic, m.log_time, m.sequence, m.data) for _, c, m in reader.iter_messages(log_time_order=False)]
        meta = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return messages, meta


def test_a_program_across_two_hosts_is_recorded_whole_by_merging_the_hosts_shares(hosts, tmp_path):
    """recorded.toml: a source on host a sends a 256 KiB array and a counter
    to a sink on host b, which acknowledges each pair to a tally on a. Each
    host records its own federates (`hprm launch --host H --record`); `hprm
    bag merge` joins the two shares into one recording, which the `mcap`
    package reads back (every message, bit-exact against what was sent, in
    tag order) and `hprm replay --check` replays as `identical`. A share
    alone is refused by the merge (naming the missing host) and by replay."""
    pytest.importorskip("mcap.reader", reason="the `mcap` package reads recordings back (pip install mcap)")
    from hprm import _native
    from recorded import SIZE, array

    hprm = _hprm()
    prefix, a, b = hosts
    multi, _ = _manifest(tmp_path, a, b, "recorded")
    shutil.copy(PROGRAM / "recorded.py", tmp_path / "recorded.py")
    env = _env(tmp_path)
    shares = {h: tmp_path / f"share-{h}.mcap" for h in ("a", "b")}
    outs = _launch_both(prefix, [hprm, str(multi)], env, extra_args={h: ["--record", str(p)] for h, p in shares.items()})
    for h, path in shares.items():
        assert f"into {path}: nothing lost" in outs[h], outs[h]
        assert f"{path} is host {h}'s share of program recorded (hosts a, b)" in outs[h], outs[h]

    def run(*argv):
        r = subprocess.run([hprm, *map(str, argv)], capture_output=True, text=True, env=env, timeout=WITHIN)
        return r.returncode, r.stdout + r.stderr

    whole = tmp_path / "whole.mcap"
    rc, out = run("bag", "merge", shares["a"], "-o", whole)
    assert rc == 2 and "host b's share is missing" in out, out
    rc, out = run("replay", shares["b"], multi, "--check")
    assert rc == 2 and "is host b's share of program recorded" in out and "hprm bag merge" in out, out
    rc, out = run("bag", "merge", shares["b"], shares["a"], "-o", whole)
    assert rc == 0 and "recorded whole" in out and "nothing lost" in out, out
    print(out.strip())

    merged, meta = _recorded_messages(whole)
    parts = [m for h in ("a", "b") for m in _recorded_messages(shares[h])[0]]
    assert sorted(merged) == sorted(parts), "the merged file holds exactly the shares' messages"
    assert [m[1:3] for m in merged] == sorted(m[1:3] for m in merged), "the merged messages are in tag order"
    summary = meta["hprm.summary"]
    assert (summary["complete"], summary["lost"], summary["federates_not_recorded"]) == ("true", "0", ""), summary
    assert "host" not in meta["hprm.run"] and meta["hprm.run"]["hosts"] == "a,b", meta["hprm.run"]

    codec = _native.Codec()
    by_topic = {}
    for topic, log_time, seq, data in merged:
        by_topic.setdefault(topic, []).append(((log_time, seq), codec.decode(data)))
    assert set(by_topic) == {"source.source.big", "source.source.small", "sink.sink.ack"}, sorted(by_topic)
    ks = {tag: k for tag, k in by_topic["source.source.small"]}
    assert list(ks.values()) == list(range(len(ks))) and len(ks) >= 5, ks
    assert len(by_topic["source.source.big"]) == len(ks) == len(by_topic["sink.sink.ack"])
    for tag, big in by_topic["source.source.big"]:
        want = array(ks[tag])
        assert big.dtype == want.dtype and big.shape == (SIZE,) and big.tobytes() == want.tobytes(), f"array {ks[tag]}"
    for tag, ack in by_topic["sink.sink.ack"]:
        want = array(ks[tag])
        assert ack == {"k": ks[tag], "sum": int(want.sum()), "first": want[:4].tobytes()}, (tag, ack)

    rc, out = run("replay", whole, multi, "--check")
    assert rc == 0, out
    line = re.search(rf"replay: federates=2 messages={len(ks)} identical", out)
    assert line, out
    print(line.group(0))


def test_shares_recorded_with_rotation_merge_as_unrotated_ones_and_a_missing_part_is_refused(hosts, tmp_path):
    """recorded.toml run twice: once each host recording its share into one
    file, once with `--record-rotate` (host a's 256 KiB arrays fill a part
    every few ticks, host b's acknowledgements a part every 200 ms of
    logical time). Each run's shares are merged; the rotated shares (named
    by their base names, the parts found beside them) merge into exactly
    the messages of the unrotated ones, in the same tag order (tags since
    each run's start, values bit-exact), with the same counts; `hprm replay
    --check` of it says `identical`. With a part of host a's share gone,
    the merge is refused naming that part's file."""
    pytest.importorskip("mcap.reader", reason="the `mcap` package reads recordings back (pip install mcap)")
    hprm = _hprm()
    prefix, a, b = hosts
    multi, _ = _manifest(tmp_path, a, b, "recorded")
    shutil.copy(PROGRAM / "recorded.py", tmp_path / "recorded.py")
    env = _env(tmp_path)

    def run(*argv):
        r = subprocess.run([hprm, *map(str, argv)], capture_output=True, text=True, env=env, timeout=WITHIN)
        return r.returncode, r.stdout + r.stderr

    def since_start(path):
        """The merged file's messages as (topic, tag since the start, microstep, data), and its summary."""
        messages, meta = _recorded_messages(path)
        start = int(meta["hprm.summary"]["start"])
        return [(t, log_time - start, seq, data) for t, log_time, seq, data in messages], meta["hprm.summary"]

    plain = {h: tmp_path / f"plain-{h}.mcap" for h in ("a", "b")}
    _launch_both(prefix, [hprm, str(multi)], env, extra_args={h: ["--record", str(p)] for h, p in plain.items()})
    rc, out = run("bag", "merge", plain["a"], plain["b"], "-o", tmp_path / "plain.mcap")
    assert rc == 0 and "recorded whole" in out, out
    want, want_summary = since_start(tmp_path / "plain.mcap")

    rotated = {h: tmp_path / f"rot-{h}.mcap" for h in ("a", "b")}
    rotate = ["--record-rotate", "size=600k,duration=200ms"]
    outs = _launch_both(prefix, [hprm, str(multi)], env, extra_args={h: ["--record", str(p), *rotate] for h, p in rotated.items()})
    parts = {h: sorted(tmp_path.glob(f"rot-{h}-*.mcap")) for h in ("a", "b")}
    assert len(parts["a"]) >= 3 and len(parts["b"]) >= 2, (parts, outs)
    assert not any(p.exists() for p in rotated.values()), "a rotated recording's base name is not written"
    whole = tmp_path / "whole.mcap"
    rc, out = run("bag", "merge", rotated["b"], rotated["a"], "-o", whole)
    assert rc == 0 and "recorded whole" in out and "nothing lost" in out, out
    print(out.strip(), f"({len(parts['a'])} parts from host a, {len(parts['b'])} from host b)")
    got, summary = since_start(whole)
    assert len(got) == len(want) and got == want, "every message, in tag order, as the unrotated shares merged give"

    def counts(s):
        kept = ("messages", "lost", "physical", "decisions", "complete", "federates_not_recorded")
        return {k: v for k, v in s.items() if k.split(".")[0] in kept}

    assert counts(summary) == counts(want_summary), (summary, want_summary)
    rc, out = run("replay", whole, multi, "--check")
    assert rc == 0 and re.search(r"replay: federates=2 messages=\d+ identical", out), out

    # A part in the middle of host a's share gone: refused, naming its file.
    gone = parts["a"][1]
    gone.rename(tmp_path / "elsewhere.mcap")
    rc, out = run("bag", "merge", rotated["a"], rotated["b"], "-o", tmp_path / "refused.mcap")
    assert rc != 0 and f"host a's share was recorded with --record-rotate and 1 of its parts is missing: {gone}" in out, out
    assert not (tmp_path / "refused.mcap").exists()
