"""HPRM side of the ROS 2 bridge benchmark: federate "ros" is
hprm-ros2-bridge (topic TOPIC -> port "img"), federate "sink" (Python)
records (frame_id, latency ns, arrival ns) of each image until "end".

  bridge_program.py BRIDGE CONFIG OUT
"""

import json
import sys
import time

import hprm

BRIDGE, CONFIG, OUT = sys.argv[1:4]


class Sink(hprm.Reactor):
    img = hprm.Input()

    def __init__(self):
        self.got = []

    @hprm.reaction(triggers="startup")
    def start(self, ctx):
        print("ready", flush=True)

    @hprm.reaction(triggers="img")
    def on(self, ctx):
        now = time.time_ns()
        m = self.img.value
        if m["header"]["frame_id"] == "end":
            with open(OUT, "w") as f:
                json.dump(self.got, f)
            ctx.request_stop()
            return
        s = m["header"]["stamp"]
        _ = m["data"].shape  # the numpy view over the store object
        self.got.append((m["header"]["frame_id"], now - (s["sec"] * 1_000_000_000 + s["nanosec"]), now))


prog = hprm.Program("ros2_bridge_bench", timeout="300s")
ros = prog.federate("ros", hprm.external(outputs=["img"]))
sink = prog.federate("sink", Sink)
prog.connect(ros.img, sink.img)

if __name__ == "__main__":
    prog.launch(commands={"ros": [BRIDGE, "--config", CONFIG, "--discovery-ms", "200"]})
