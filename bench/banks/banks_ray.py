"""The same broadcast with Ray (the thesis's baseline, ../shared
BENCHMARKS.md): the source ``ray.put``s the array once per round, N actors
``ray.get`` it and echo it back, the source gathers with ``ray.get``.

    python banks_ray.py --width N --size BYTES --rounds N --warmup N --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import ray

p = argparse.ArgumentParser()
p.add_argument("--width", type=int, required=True)
p.add_argument("--size", type=int, required=True)
p.add_argument("--rounds", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--out", required=True)
ARGS = p.parse_args()


@ray.remote
class Member:
    def ready(self):
        return True

    def echo(self, round_, refs):
        data = ray.get(refs[0])
        return {"round": round_, "data": data}


def main():
    # num_cpus=N so N actors can start on 2 cores; the store sized for the payloads.
    ray.init(num_cpus=ARGS.width, object_store_memory=max(1024, 40 * ARGS.size // 2**20) * 2**20, include_dashboard=False, log_to_driver=False)
    members = [Member.remote() for _ in range(ARGS.width)]
    # Every actor started before anything is timed (their start is Ray's, not a round's).
    ray.get([m.ready.remote() for m in members])
    payload = np.random.default_rng(25).integers(0, 256, ARGS.size, dtype=np.uint8)
    latency, error = [], None
    for r in range(ARGS.warmup + ARGS.rounds):
        b = r % 251
        payload[0] = payload[-1] = b
        t0 = time.perf_counter_ns()
        ref = ray.put(payload)
        replies = ray.get([m.echo.remote(r, [ref]) for m in members])
        t1 = time.perf_counter_ns()
        if any(x["round"] != r or x["data"][0] != b or x["data"][-1] != b for x in replies):
            error = f"round {r}: a wrong reply"
            break
        if r >= ARGS.warmup:
            latency.append(t1 - t0)
    with open(ARGS.out, "w") as f:
        json.dump({"latency_ns": latency, "error": error}, f)
    ray.shutdown()


if __name__ == "__main__":
    main()
