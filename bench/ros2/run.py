"""ROS 2 -> hprm-ros2-bridge -> HPRM vs ROS 2 -> ROS 2, side by side.

For each image size (1 KB, 1 MB, 6 MB), one rclpy publisher sends paced
images (latency: wall clock at publish, in header.stamp, to the receiving
Python callback/reaction, the data in hand) and then a burst (rate:
messages/s arriving at the receiver). Receivers: an rclpy subscriber
(ROS 2 directly), and an HPRM program whose federate "ros" is the bridge and
whose Python federate receives the image as a numpy array from the store.

  bench/ros2/run.py BRIDGE [--quick] [--out DIR]

Writes DIR/ros2-bridge-DATE.{json,md,png} (default bench/results). Run it
through bench/ros2/run.sh, which prepares the environment.
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # plotting.py

SIZES = [1_000, 1_000_000, 6_220_800]  # 6 220 800 = 1920 x 1080 rgb8
WARMUP = 3


def start(argv, log, ready=None, timeout=60):
    out = open(log, "w")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    if ready:
        deadline = time.monotonic() + timeout
        while ready not in open(log).read():
            if p.poll() is not None or time.monotonic() > deadline:
                stop(p)
                raise SystemExit(f"{argv[1]} did not start:\n{open(log).read()}")
            time.sleep(0.05)
    return p


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def measure(receiver_argv, size, topic, n_lat, n_rate, tmp, name):
    """Starts the receiver, then the publisher; returns latencies and rate."""
    out = os.path.join(tmp, f"{name}.json")
    recv = start(receiver_argv(out), os.path.join(tmp, f"{name}-recv.log"), ready="ready")
    pub = start([sys.executable, os.path.join(HERE, "ros_bench_node.py"), "pub", str(size), topic, str(n_lat), "0.05", str(n_rate), "1"], os.path.join(tmp, f"{name}-pub.log"))
    try:
        recv.wait(120)
    except subprocess.TimeoutExpired:
        pass
    stop(pub)
    stop(recv)
    if not os.path.exists(out):
        raise SystemExit(f"{name}: no result:\n{open(os.path.join(tmp, f'{name}-recv.log')).read()[-3000:]}")
    got = json.load(open(out))
    # The first WARMUP paced messages set up connections (and, for HPRM, the
    # store mappings): excluded for both receivers.
    lat = sorted(ns / 1e6 for tag, ns, _ in [g for g in got if g[0] == "lat"][WARMUP:])
    arrivals = [t for tag, _, t in got if tag == "rate"]
    rate = (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9) if len(arrivals) > 1 and arrivals[-1] > arrivals[0] else float("nan")
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))] if lat else float("nan")
    return {
        "latency_ms_p50": statistics.median(lat) if lat else float("nan"),
        "latency_ms_p99": p99,
        "latency_received": len(lat) + min(WARMUP, sum(1 for g in got if g[0] == "lat")),
        "latency_sent": n_lat,
        "rate_msgs_per_s": rate,
        "rate_received": len(arrivals),
        "rate_sent": n_rate,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bridge")
    ap.add_argument("--quick", action="store_true", help="few messages (under a minute)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results"))
    args = ap.parse_args()
    n_lat, n_rate = (20, 20) if args.quick else (100, 200)
    os.environ.setdefault("ROS_DOMAIN_ID", str(30 + os.getpid() % 60))
    tmp = tempfile.mkdtemp(prefix="ros2-bridge-bench-")
    rows = []
    for size in SIZES:
        topic = f"/bench_{os.getpid()}_{size}"
        config = os.path.join(tmp, f"bridge-{size}.toml")
        with open(config, "w") as f:
            f.write(f'[[topic]]\ntopic = "{topic}"\ntype = "sensor_msgs/msg/Image"\ndirection = "ros->hprm"\nport = "img"\n')
        # Few messages fit a reliable KeepLast(10) queue at 6 MB: the burst is what the receiver keeps up with.
        count_rate = n_rate if size < 1_000_000 else max(10, n_rate // 4)
        direct = measure(lambda out, topic=topic: [sys.executable, os.path.join(HERE, "ros_bench_node.py"), "sub", topic, out], size, topic, n_lat, count_rate, tmp, f"direct-{size}")
        print(f"{size:>9} B  ROS 2 -> ROS 2           p50 {direct['latency_ms_p50']:8.2f} ms  p99 {direct['latency_ms_p99']:8.2f} ms  {direct['rate_msgs_per_s']:8.1f} msg/s", flush=True)
        bridged = measure(lambda out, config=config: [sys.executable, os.path.join(HERE, "bridge_program.py"), args.bridge, config, out], size, topic, n_lat, count_rate, tmp, f"bridge-{size}")
        print(f"{size:>9} B  ROS 2 -> bridge -> HPRM  p50 {bridged['latency_ms_p50']:8.2f} ms  p99 {bridged['latency_ms_p99']:8.2f} ms  {bridged['rate_msgs_per_s']:8.1f} msg/s", flush=True)
        rows.append({"size": size, "ros2_direct": direct, "bridge_to_hprm": bridged})
    date = datetime.date.today().isoformat()
    stem = os.path.join(args.out, f"ros2-bridge-{date}{'-quick' if args.quick else ''}")
    report = {"benchmark": "ros2-bridge", "date": date, "quick": args.quick, "latency_messages": n_lat, "rows": rows}
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(f"# ROS 2 -> bridge -> HPRM vs ROS 2 -> ROS 2 ({date}{', quick' if args.quick else ''})\n\n")
        f.write("Python receivers both ways (rclpy callback; HPRM Python reaction with the image as a numpy view of the store). ")
        f.write(f"Latency: publish wall clock (header.stamp) to the receiver holding the data, paced at 20 Hz, the first {WARMUP} messages excluded. Rate: a back-to-back burst, messages/s arriving.\n\n")
        f.write("| size | ROS 2 p50 ms | bridge p50 ms | ratio | ROS 2 p99 ms | bridge p99 ms | ROS 2 msg/s | bridge msg/s | received (lat, rate) ROS 2 / bridge |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            d, b = r["ros2_direct"], r["bridge_to_hprm"]
            f.write(
                f"| {r['size']:,} B | {d['latency_ms_p50']:.2f} | {b['latency_ms_p50']:.2f} | {b['latency_ms_p50'] / d['latency_ms_p50']:.2f}x | {d['latency_ms_p99']:.2f} | {b['latency_ms_p99']:.2f} | "
                f"{d['rate_msgs_per_s']:.1f} | {b['rate_msgs_per_s']:.1f} | {d['latency_received']}/{d['latency_sent']}, {d['rate_received']}/{d['rate_sent']} / {b['latency_received']}/{b['latency_sent']}, {b['rate_received']}/{b['rate_sent']} |\n"
            )
    plot(report, stem + ".png")
    print(f"wrote {stem}.json, .md, .png")


def plot(report, path):
    from plotting import plt, save, size_axis

    sizes = [r["size"] for r in report["rows"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in [("ros2_direct", "ROS 2 -> ROS 2 (rclpy)"), ("bridge_to_hprm", "ROS 2 -> bridge -> HPRM")]:
        a.plot(sizes, [r[key]["latency_ms_p50"] for r in report["rows"]], marker="o", label=label)
        b.plot(sizes, [r[key]["rate_msgs_per_s"] for r in report["rows"]], marker="o", label=label)
    size_axis(a, sizes, "image size")
    size_axis(b, sizes, "image size")
    a.set_ylabel("latency p50 (ms)")
    b.set_ylabel("messages/s")
    a.legend()
    a.set_title("latency")
    b.set_title("rate")
    save(fig, path)


if __name__ == "__main__":
    main()
