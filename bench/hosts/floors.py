"""The two floors of the hosts benchmark: what no middleware between two
hosts can beat, measured over the same veth link in the same run.

Each moves the bytes the workload needs at least, per round: echo, one
S-byte transfer from host a to host b and 4 small replies back; fresh, that
plus 4 S-byte transfers back. The side on host a times the round, from
before its send to the last reply's last byte, and writes its samples in the
format of bench/broadcast/broadcast_common.py.

    tcp:   a plain TCP connection (TCP_NODELAY), sendall / recv_into into a
           pre-touched buffer;
    zenoh: Eclipse Zenoh's Python API (the eclipse-zenoh wheel), two peers
           with explicit endpoints (no multicast scouting), put with
           congestion control BLOCK to a subscriber on the other peer;
           its transport tuned as hprm-link tunes its own (send queue,
           receive pool).

    python floors.py tcp|zenoh a|b --peer ADDRESS --size BYTES \
        --variant echo|fresh --rounds N --warmup N --out FILE.json

ADDRESS: where the listening side listens (tcp: side b, on all its
addresses, so side a connects to host b's ADDRESS; zenoh: side a listens on
host a's ADDRESS, side b connects to it). Start both sides at once: the
connecting side retries for a while.
"""

from __future__ import annotations

import queue
import socket
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broadcast"))
from broadcast_common import RECEIVERS, fail, make_payload, parse_args, write_result  # noqa: E402

TCP_PORT = 17461
ZENOH_PORT = 17462
SMALL = 16  # bytes of one small reply
CONNECT_S = 30.0


def _args(p):
    p.add_argument("floor", choices=("tcp", "zenoh"))
    p.add_argument("side", choices=("a", "b"))
    p.add_argument("--peer", required=True, help="the listening side's address (tcp: host b, zenoh: host a)")


def _reply_bytes(size: int, variant: str) -> int:
    return RECEIVERS * (SMALL if variant == "echo" else size)


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the other side closed the connection")
        got += n


def tcp(args) -> None:
    total = args.warmup + args.rounds
    back = _reply_bytes(args.size, args.variant)
    if args.side == "b":
        srv = socket.create_server(("0.0.0.0", TCP_PORT))
        srv.settimeout(CONNECT_S)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        inbox = memoryview(np.zeros(args.size, np.uint8))
        replies = [np.full(SMALL if args.variant == "echo" else args.size, 7, np.uint8) for _ in range(RECEIVERS)]
        for _ in range(total):
            _recv_exactly(conn, inbox)
            for r in replies:
                conn.sendall(r)
        conn.close()
        return
    deadline = time.monotonic() + CONNECT_S
    while True:
        try:
            sock = socket.create_connection((args.peer, TCP_PORT), timeout=CONNECT_S)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = make_payload(args.size)
    inbox = memoryview(np.zeros(back, np.uint8))
    latency = []
    for r in range(total):
        t0 = time.perf_counter_ns()
        sock.sendall(payload)
        _recv_exactly(sock, inbox)
        if r >= args.warmup:
            latency.append(time.perf_counter_ns() - t0)
    sock.close()
    write_result(args.out, latency)


def _zenoh_session(args):
    import json

    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps("peer"))
    conf.insert_json5("scouting/multicast/enabled", "false")
    # The namespaces share /dev/shm: Zenoh would hand large payloads over in
    # shared memory instead of the link; off, as between two computers.
    conf.insert_json5("transport/shared_memory/enabled", "false")
    # Zenoh tuned for bulk data as hprm-link tunes it (hprm-link/src/daemon.rs,
    # zenoh_config; docs/src/hosts.md, "How the link configures Zenoh"): the
    # floor is what Zenoh can do. The data priority's send queue at its most
    # batches (16; the default 2 makes the fragmenter wait on the socket
    # writer every 128 KiB), and a receive pool that holds a 50 MB message
    # (the default, one 64 KiB buffer, allocates a buffer per batch of it).
    conf.insert_json5("transport/link/tx/queue/size/data", "16")
    conf.insert_json5("transport/link/rx/buffer_size", str(64 << 20))
    endpoint = f"tcp/{args.peer}:{ZENOH_PORT}"
    conf.insert_json5("listen/endpoints" if args.side == "a" else "connect/endpoints", json.dumps([endpoint]))
    return zenoh, zenoh.open(conf)


def zenoh_floor(args) -> None:
    zenoh, session = _zenoh_session(args)
    total = args.warmup + args.rounds
    block = zenoh.CongestionControl.BLOCK
    inbox: queue.Queue = queue.Queue()
    if args.side == "b":
        replies = [session.declare_publisher(f"hosts/reply/{i}", congestion_control=block, express=args.variant == "echo") for i in range(RECEIVERS)]
        bodies = [bytes(SMALL) if args.variant == "echo" else np.full(args.size, 7, np.uint8).tobytes() for _ in range(RECEIVERS)]
        session.declare_subscriber("hosts/hello", lambda s: session.put("hosts/ready", b"1", congestion_control=block))
        session.declare_subscriber("hosts/send", lambda s: inbox.put(len(s.payload.to_bytes())))
        for _ in range(total):
            n = inbox.get(timeout=CONNECT_S + 30)
            if n != args.size:
                raise SystemExit(f"floors: zenoh got {n} bytes, expected {args.size}")
            for pub, body in zip(replies, bodies):
                pub.put(body)
        # Side a may still need the last replies: they are sent; give the
        # session a moment to flush before it closes.
        time.sleep(0.5)
        session.close()
        return
    ready: queue.Queue = queue.Queue()
    session.declare_subscriber("hosts/ready", lambda s: ready.put(1))
    session.declare_subscriber("hosts/reply/*", lambda s: inbox.put(len(s.payload.to_bytes())))
    deadline = time.monotonic() + CONNECT_S
    while True:
        session.put("hosts/hello", b"1")
        try:
            ready.get(timeout=0.2)
            break
        except queue.Empty:
            if time.monotonic() > deadline:
                fail(args.out, f"zenoh: side b did not answer within {CONNECT_S:g} s")
    send = session.declare_publisher("hosts/send", congestion_control=block)
    payload = make_payload(args.size).tobytes()
    want = SMALL if args.variant == "echo" else args.size
    latency = []
    for r in range(total):
        t0 = time.perf_counter_ns()
        send.put(payload)
        for _ in range(RECEIVERS):
            n = inbox.get(timeout=60)
            if n != want:
                fail(args.out, f"zenoh: a reply of {n} bytes, expected {want}")
        if r >= args.warmup:
            latency.append(time.perf_counter_ns() - t0)
    write_result(args.out, latency)
    session.close()


def main() -> None:
    args = parse_args(extra=_args)
    (tcp if args.floor == "tcp" else zenoh_floor)(args)


if __name__ == "__main__":
    main()
