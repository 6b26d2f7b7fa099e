"""Small-message ping-pong with the baselines of BENCHMARKS.md workload 4
(see small_common.py for what is measured): a Unix-socket ping-pong (the
raw floor), ROS 2 rclpy (Fast DDS), dora-rs (Python nodes) and iceoryx2
(Python, publish-subscribe over shared memory, polled).

    python small_peers.py --system socket|rclpy|dora|iceoryx2 \
        --sizes 8,64,... --rounds N --warmup N --out FILE.json

ping runs in this process and starts pong (``--role pong``) as a second
process, except for dora, whose ``dora run`` starts both nodes from a
dataflow written to a temporary directory. Stamps travel beside the
payload: in a 24-byte header (socket, iceoryx2), in a string field of the
ROS 2 message, in dora's metadata.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

from small_common import ECHO_TIMEOUT_S, Samples, fail, parse_args, payloads, schedule

HEADER = struct.Struct("<qqq")  # k, ping's stamp, pong's stamp
HELLO = -1
HELLO_TIMEOUT_S = 60.0


def timed_out(args, k: int) -> None:
    fail(args.out, f"ping {k}: no echo within {ECHO_TIMEOUT_S:g} s")


# --------------------------------------------------------------------- socket


def recv_exact(s: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        r = s.recv_into(view[got:n])
        if r == 0:
            raise ConnectionError("peer closed")
        got += r


def socket_pong(args) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(args.sock)
    buf = bytearray(HEADER.size + 4 + max(args.sizes))
    view = memoryview(buf)
    try:
        while True:
            recv_exact(s, view, HEADER.size + 4)
            n = int.from_bytes(view[HEADER.size:HEADER.size + 4], "little")
            recv_exact(s, view[HEADER.size + 4:], n)
            seen = time.perf_counter_ns()
            k, stamp, _ = HEADER.unpack_from(buf)
            HEADER.pack_into(buf, 0, k, stamp, seen)
            s.sendall(view[:HEADER.size + 4 + n])
    except ConnectionError:
        pass


@contextlib.contextmanager
def unix_pong(prefix: str):
    """A Unix socket server and this script re-run as its `pong` peer:
    yields (connection to the peer, the peer's process)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = os.path.join(tmp, "s")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        pong = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--role", "pong", "--sock", path])
        srv.settimeout(HELLO_TIMEOUT_S)
        conn, _ = srv.accept()
        yield conn, pong


def socket_ping(args) -> None:
    data = payloads(args)
    samples = Samples(args.sizes)
    with unix_pong("small-sock-") as (conn, pong):
        conn.settimeout(ECHO_TIMEOUT_S)
        buf = bytearray(HEADER.size + 4 + max(args.sizes))
        view = memoryview(buf)
        try:
            for k, (size, measured) in enumerate(schedule(args)):
                stamp = time.perf_counter_ns()
                frame = HEADER.pack(k, stamp, 0) + size.to_bytes(4, "little") + data[size].tobytes()
                conn.sendall(frame)
                try:
                    recv_exact(conn, view, HEADER.size + 4 + size)
                except socket.timeout:
                    timed_out(args, k)
                back = time.perf_counter_ns()
                kk, st, seen = HEADER.unpack_from(buf)
                if kk != k:
                    fail(args.out, f"echo {kk}, expected {k}")
                if measured:
                    samples.add(size, st, seen, back)
        finally:
            conn.close()
            pong.wait(10)
    samples.write(args.out)


# ---------------------------------------------------------------------- rclpy


def rclpy_run(args, role: str) -> None:
    import array

    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import UInt8MultiArray

    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    rclpy.init()
    node = rclpy.create_node(f"small_{role}")
    inbox: list = []
    if role == "pong":
        pub = node.create_publisher(UInt8MultiArray, "small_pong", qos)

        def echo(msg):
            seen = time.perf_counter_ns()
            k, stamp = msg.layout.dim[0].label.split()[:2] if msg.layout.dim else ("-2", "0")
            msg.layout.dim[0].label = f"{k} {stamp} {seen}"
            pub.publish(msg)
            if k == "-2":
                inbox.append(None)

        node.create_subscription(UInt8MultiArray, "small_ping", echo, qos)
        parent = os.getppid()
        while not inbox and os.getppid() == parent:
            rclpy.spin_once(node, timeout_sec=0.5)
        rclpy.shutdown()
        return

    from std_msgs.msg import MultiArrayDimension

    pub = node.create_publisher(UInt8MultiArray, "small_ping", qos)
    node.create_subscription(UInt8MultiArray, "small_pong", inbox.append, qos)
    pong = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--role", "pong"])
    data = payloads(args)

    def message(arr, label):
        msg = UInt8MultiArray()
        buf = array.array("B")
        buf.frombytes(memoryview(arr))
        msg.data = buf
        msg.layout.dim = [MultiArrayDimension(label=label, size=arr.size, stride=arr.size)]
        return msg

    def wait_echo(k, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
            while inbox:
                m = inbox.pop()
                kk, stamp, seen = m.layout.dim[0].label.split()
                if int(kk) == k:
                    return m, int(stamp), int(seen)
        return None

    try:
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while True:
            pub.publish(message(np.zeros(1, np.uint8), f"{HELLO} 0"))
            if wait_echo(HELLO, 0.2):
                break
            if time.monotonic() > deadline:
                fail(args.out, f"discovery: pong did not answer within {HELLO_TIMEOUT_S:g} s")
        samples = Samples(args.sizes)
        for k, (size, measured) in enumerate(schedule(args)):
            stamp = time.perf_counter_ns()
            pub.publish(message(data[size], f"{k} {stamp}"))
            got = wait_echo(k, ECHO_TIMEOUT_S)
            back = time.perf_counter_ns()
            if got is None:
                timed_out(args, k)
            if len(got[0].data) != size:
                fail(args.out, f"echo of {len(got[0].data)} bytes, expected {size}")
            if measured:
                samples.add(size, got[1], got[2], back)
        samples.write(args.out)
    finally:
        for _ in range(3):
            pub.publish(message(np.zeros(1, np.uint8), "-2 0"))
            rclpy.spin_once(node, timeout_sec=0.05)
        try:
            pong.wait(10)
        except subprocess.TimeoutExpired:
            pong.kill()
        rclpy.shutdown()


# ----------------------------------------------------------------------- dora


def dora_node(args, role: str) -> None:
    if args.rate:
        return dora_rate_node(args)
    import pyarrow as pa
    from dora import Node

    node = Node()
    if role == "pong":
        for event in node:
            if event["type"] == "STOP":
                break
            if event["type"] == "INPUT":
                seen = time.perf_counter_ns()
                md = event["metadata"]
                node.send_output("echo", event["value"], {"k": md["k"], "stamp": md["stamp"], "seen": seen})
        return

    data = {s: pa.array(a) for s, a in payloads(args).items()}

    def wait_echo(k, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            ev = node.next(timeout=0.05)
            if ev is None:
                fail(args.out, "dora: pong closed its output")
            if ev["type"] == "INPUT" and ev["metadata"]["k"] == k:
                return ev
        return None

    deadline = time.monotonic() + HELLO_TIMEOUT_S
    while True:
        node.send_output("ping", pa.array(np.zeros(1, np.uint8)), {"k": HELLO, "stamp": 0})
        if wait_echo(HELLO, 0.2):
            break
        if time.monotonic() > deadline:
            fail(args.out, f"hello: pong did not answer within {HELLO_TIMEOUT_S:g} s")
    samples = Samples(args.sizes)
    for k, (size, measured) in enumerate(schedule(args)):
        stamp = time.perf_counter_ns()
        node.send_output("ping", data[size], {"k": k, "stamp": stamp})
        ev = wait_echo(k, ECHO_TIMEOUT_S)
        back = time.perf_counter_ns()
        if ev is None:
            timed_out(args, k)
        if len(ev["value"]) != size:
            fail(args.out, f"echo of {len(ev['value'])} bytes, expected {size}")
        if measured:
            samples.add(size, ev["metadata"]["stamp"], ev["metadata"]["seen"], back)
    samples.write(args.out)


def dora_run(args) -> None:
    dora = shutil.which("dora", path=os.path.dirname(sys.executable)) or shutil.which("dora")
    if dora is None:
        fail(args.out, "the dora CLI is not installed: pip install dora-rs-cli dora-rs pyarrow")
    me = os.path.abspath(__file__)
    argv = sys.argv[1:]
    yml = "nodes:\n" + "\n".join([
        f"  - id: ping\n    path: {sys.executable}\n    args: {shlex.join([me, *argv, '--role', 'ping'])}\n"
        "    inputs:\n      echo: pong/echo\n    outputs:\n      - ping",
        f"  - id: pong\n    path: {sys.executable}\n    args: {shlex.join([me, *argv, '--role', 'pong'])}\n"
        "    inputs:\n      ping: ping/ping\n    outputs:\n      - echo",
    ]) + "\n"
    with tempfile.TemporaryDirectory(prefix="small-dora-") as tmp:
        path = os.path.join(tmp, "dataflow.yml")
        with open(path, "w") as f:
            f.write(yml)
        limit = 60 + len(schedule(args)) * ECHO_TIMEOUT_S
        try:
            proc = subprocess.run([dora, "run", path], cwd=tmp, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            fail(args.out, f"dora run did not finish within {limit:g} s")
        if not os.path.exists(args.out):
            fail(args.out, f"dora run exited with {proc.returncode} and wrote no result: {(proc.stderr or proc.stdout)[-2000:]}")


# ------------------------------------------------------------------- iceoryx2


def iceoryx2_run(args, role: str) -> None:
    import ctypes

    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Warn)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    tag = args.service or f"hprm-bench-{os.getpid()}"

    def service(name):
        return node.service_builder(iox2.ServiceName.new(f"{tag}/{name}")).publish_subscribe(iox2.Slice[ctypes.c_uint8]).open_or_create()

    out_name, in_name = ("ping", "pong") if role == "ping" else ("pong", "ping")
    pub = service(out_name).publisher_builder().initial_max_slice_len(HEADER.size + max(args.sizes)).create()
    sub = service(in_name).subscriber_builder().create()

    def send(header: bytes, body) -> None:
        sample = pub.loan_slice_uninit(HEADER.size + len(body))
        view = np.frombuffer(sample.payload().as_memory_view(), dtype=np.uint8)
        view[:HEADER.size] = np.frombuffer(header, dtype=np.uint8)
        view[HEADER.size:] = body
        sample.assume_init().send()

    def poll(limit):
        """Busy-polls the subscriber (iceoryx2's way: no wake-up)."""
        end = time.perf_counter() + limit
        while time.perf_counter() < end:
            s = sub.receive()
            if s is not None:
                return s
        return None

    if role == "pong":
        parent = os.getppid()
        while os.getppid() == parent:
            s = poll(0.5)
            if s is None:
                continue
            seen = time.perf_counter_ns()
            view = np.frombuffer(s.payload().as_memory_view(), dtype=np.uint8)
            k, stamp, _ = HEADER.unpack(view[:HEADER.size].tobytes())
            if k == -2:
                return
            send(HEADER.pack(k, stamp, seen), view[HEADER.size:])
        return

    pong = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--role", "pong", "--service", tag])
    data = payloads(args)
    try:
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while poll(0.1) is None:
            if time.monotonic() > deadline:
                fail(args.out, f"hello: pong did not answer within {HELLO_TIMEOUT_S:g} s")
            send(HEADER.pack(HELLO, 0, 0), np.zeros(1, np.uint8))
        while poll(0.05) is not None:
            pass
        samples = Samples(args.sizes)
        for k, (size, measured) in enumerate(schedule(args)):
            stamp = time.perf_counter_ns()
            send(HEADER.pack(k, stamp, 0), data[size])
            while True:
                s = poll(ECHO_TIMEOUT_S)
                back = time.perf_counter_ns()
                if s is None:
                    timed_out(args, k)
                view = np.frombuffer(s.payload().as_memory_view(), dtype=np.uint8)
                kk, st, seen = HEADER.unpack(view[:HEADER.size].tobytes())
                if kk == k:
                    break
            if view.size - HEADER.size != size:
                fail(args.out, f"echo of {view.size - HEADER.size} bytes, expected {size}")
            del view, s
            if measured:
                samples.add(size, st, seen, back)
        samples.write(args.out)
    finally:
        send(HEADER.pack(-2, 0, 0), np.zeros(1, np.uint8))
        try:
            pong.wait(10)
        except subprocess.TimeoutExpired:
            pong.kill()


# ----------------------------------------------------------------------- rate
# --rate: a sustained stream instead of the ping-pong: ping sends
# warmup + rounds messages of the (first) size as fast as it can, pong
# counts them and writes {"messages", "sent", "seconds"}: the messages
# between the first measured one and the last, and the time between them.


class Counter:
    def __init__(self, args):
        self.args, self.count, self.first, self.last = args, 0, 0, 0

    def got(self) -> None:
        self.count += 1
        now = time.perf_counter_ns()
        if self.count == self.args.warmup + 1:
            self.first = now
        self.last = now

    @property
    def total(self) -> int:
        return self.args.warmup + self.args.rounds

    def write(self) -> None:
        from small_common import write_result

        measured = self.count - self.args.warmup - 1
        if measured < 1:
            write_result(self.args.out, error=f"the receiver got {self.count} of {self.total} messages (the rest were dropped), "
                                              f"not more than the {self.args.warmup} warm-up ones")
        else:
            write_result(self.args.out, [], [], None, messages=measured, sent=self.args.rounds, span_s=(self.last - self.first) / 1e9)


def socket_rate(args) -> None:
    size = args.sizes[0]
    if args.role == "pong":
        c = Counter(args)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(args.sock)
        buf = bytearray(4 + size)
        view = memoryview(buf)
        try:
            while c.count < c.total:
                recv_exact(s, view, 4 + size)
                c.got()
        except ConnectionError:
            pass
        c.write()
        return
    with unix_pong("rate-sock-") as (conn, pong):
        frame = size.to_bytes(4, "little") + bytes(size)
        for _ in range(args.warmup + args.rounds):
            conn.sendall(frame)
        pong.wait(60)
        conn.close()


def rclpy_rate(args) -> None:
    import array

    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import UInt8MultiArray

    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    rclpy.init()
    node = rclpy.create_node(f"rate_{args.role or 'ping'}")
    if args.role == "pong":
        c = Counter(args)
        node.create_subscription(UInt8MultiArray, "rate", lambda m: c.got(), qos)
        idle_since = time.monotonic()
        while c.count < c.total and os.getppid() != 1:
            before = c.count
            rclpy.spin_once(node, timeout_sec=0.1)
            if c.count != before:
                idle_since = time.monotonic()
            elif c.count > 0 and time.monotonic() - idle_since > 2.0:
                break  # the rest was dropped (reliable, but a bounded history)
        c.write()
        rclpy.shutdown()
        return
    pub = node.create_publisher(UInt8MultiArray, "rate", qos)
    pong = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--role", "pong"])
    deadline = time.monotonic() + HELLO_TIMEOUT_S
    while pub.get_subscription_count() < 1:
        if time.monotonic() > deadline:
            fail(args.out, f"discovery: the receiver did not subscribe within {HELLO_TIMEOUT_S:g} s")
        rclpy.spin_once(node, timeout_sec=0.05)
    time.sleep(0.5)  # the subscription matched on this side; give the other side a moment
    msg = UInt8MultiArray()
    msg.data = array.array("B", bytes(args.sizes[0]))
    for _ in range(args.warmup + args.rounds):
        pub.publish(msg)
    try:
        pong.wait(120)
    except subprocess.TimeoutExpired:
        pong.kill()
    rclpy.shutdown()


def dora_rate_node(args) -> None:
    import pyarrow as pa
    from dora import Node

    node = Node()
    if args.role == "pong":
        c = Counter(args)
        for event in node:
            if event["type"] == "INPUT":
                c.got()
                if c.count >= c.total:
                    break
            elif event["type"] == "STOP":
                break
        c.write()
        return
    data = pa.array(np.zeros(args.sizes[0], np.uint8))
    for _ in range(args.warmup + args.rounds):
        node.send_output("ping", data)


# Samples a subscriber holds before the publisher must wait (lossless, as
# the other rows: a full buffer makes the publisher retry, not drop).
IOX2_RATE_BUFFER = 1024


def iceoryx2_rate(args) -> None:
    import ctypes

    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Warn)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    tag = args.service or f"hprm-bench-rate-{os.getpid()}"
    size = args.sizes[0]
    service = (
        node.service_builder(iox2.ServiceName.new(f"{tag}/rate"))
        .publish_subscribe(iox2.Slice[ctypes.c_uint8])
        .subscriber_max_buffer_size(IOX2_RATE_BUFFER)
        .enable_safe_overflow(False)
        .open_or_create()
    )
    ready = f"{args.out}.ready"
    if args.role == "pong":
        c = Counter(args)
        sub = service.subscriber_builder().buffer_size(IOX2_RATE_BUFFER).create()
        open(ready, "w").close()
        parent, idle_since = os.getppid(), time.monotonic()
        while c.count < c.total and os.getppid() == parent:
            s = sub.receive()
            if s is None:
                if c.count > 0 and time.monotonic() - idle_since > 2.0:
                    break  # nothing more is coming
                continue
            c.got()
            idle_since = time.monotonic()
            del s
        c.write()
        return
    pong = subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--role", "pong", "--service", tag])
    try:
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while not os.path.exists(ready):
            if time.monotonic() > deadline or pong.poll() is not None:
                fail(args.out, f"the receiver did not subscribe within {HELLO_TIMEOUT_S:g} s")
            time.sleep(0.01)
        # Created after the subscriber: connected from the first sample.
        pub = service.publisher_builder().initial_max_slice_len(size).backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create()
        body = np.zeros(size, np.uint8)
        for _ in range(args.warmup + args.rounds):
            sample = pub.loan_slice_uninit(size)
            np.frombuffer(sample.payload().as_memory_view(), dtype=np.uint8)[:] = body
            sample.assume_init().send()
        pong.wait(120)
    finally:
        if pong.poll() is None:
            pong.kill()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ready)


def main() -> None:
    def extra(p):
        p.add_argument("--system", choices=("socket", "rclpy", "dora", "iceoryx2"), required=True)
        p.add_argument("--role", choices=("ping", "pong"), help="(internal)")
        p.add_argument("--sock", help="(internal) the socket floor's path")
        p.add_argument("--service", help="(internal) iceoryx2 service prefix")
        p.add_argument("--rate", action="store_true", help="a sustained stream of --rounds messages of the first size, not a ping-pong")

    args = parse_args(extra=extra)
    if args.rate:
        if args.system == "socket":
            socket_rate(args)
        elif args.system == "rclpy":
            rclpy_rate(args)
        elif args.system == "dora":
            dora_rate_node(args) if args.role else dora_run(args)
        else:
            iceoryx2_rate(args)
        return
    if args.system == "socket":
        socket_pong(args) if args.role == "pong" else socket_ping(args)
    elif args.system == "rclpy":
        rclpy_run(args, args.role or "ping")
    elif args.system == "dora":
        dora_node(args, args.role) if args.role else dora_run(args)
    else:
        iceoryx2_run(args, args.role or "ping")


if __name__ == "__main__":
    main()
