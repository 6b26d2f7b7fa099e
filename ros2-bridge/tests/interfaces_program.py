"""The HPRM program of the bridge's service, action and parameter tests:
federate "ros" is hprm-ros2-bridge with CONFIG (tests/test_interfaces.py
writes it), federate "app" is a Python reactor that

- calls the ROS service test_msgs/BasicTypes (ports basic_req/basic_resp)
  every 300 ms with int32_value = k, string_value = "hprm k";
- serves test_msgs/BasicTypes to ROS clients (served_req/served_resp):
  int32_value * 2, string_value "hprm got <string_value>";
- sends Fibonacci goals to a ROS action server (fib_goal, fib_feedback,
  fib_result, fib_cancel): order 5, and once that has its result, order
  1000, canceled at its second feedback;
- serves Fibonacci to ROS action clients (goal, feedback, result,
  cancel): one step every 100 ms (feedback), the result at `order` steps,
  status "canceled" with the sequence so far when canceled;
- records the values of the bridge's parameter port "gain".

Everything it receives is recorded to OUT (pickle, rewritten at each
value) under the port's name.

  interfaces_program.py BRIDGE CONFIG OUT [--timeout S]
"""

import argparse
import os
import pickle

import hprm

ap = argparse.ArgumentParser()
ap.add_argument("bridge")
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--timeout", default="120s")
args = ap.parse_args()

TO_ROS = ["basic_req", "served_resp", "fib_goal", "fib_cancel", "served_feedback", "served_result"]
FROM_ROS = ["basic_resp", "served_req", "fib_feedback", "fib_result", "served_goal", "served_cancel", "gain"]


class App(hprm.Reactor):
    # Ports are class attributes: FROM_ROS inputs, TO_ROS outputs.
    basic_resp = hprm.Input()
    served_req = hprm.Input()
    fib_feedback = hprm.Input()
    fib_result = hprm.Input()
    served_goal = hprm.Input()
    served_cancel = hprm.Input()
    gain = hprm.Input()
    basic_req = hprm.Output()
    served_resp = hprm.Output()
    fib_goal = hprm.Output()
    fib_cancel = hprm.Output()
    served_feedback = hprm.Output()
    served_result = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(offset="1s", period="300ms")
        self.step = hprm.LogicalAction()
        self.got = {p: [] for p in FROM_ROS}
        self.k = 0
        self.fib_sent = 0
        self.fib_canceled = False
        # Goals served: goal id -> (order, sequence so far).
        self.serving = {}

    def record(self, port, v):
        self.got[port].append(v)
        with open(args.out + ".tmp", "wb") as f:
            pickle.dump(self.got, f)
        os.replace(args.out + ".tmp", args.out)

    @hprm.reaction(triggers="tick", effects=["basic_req", "fib_goal"])
    def call(self, ctx):
        if len(self.got["basic_resp"]) < 3:
            self.k += 1
            ctx.set(self.basic_req, {"int32_value": self.k, "string_value": f"hprm {self.k}"})
        if self.fib_sent == 0:
            self.fib_sent = 1
            ctx.set(self.fib_goal, {"order": 5})

    @hprm.reaction(triggers="basic_resp")
    def called(self, ctx):
        self.record("basic_resp", ctx.get(self.basic_resp))

    @hprm.reaction(triggers="served_req", effects="served_resp")
    def serve(self, ctx):
        req = ctx.get(self.served_req)
        self.record("served_req", req)
        ctx.set(self.served_resp, {"int32_value": req["int32_value"] * 2, "string_value": f"hprm got {req['string_value']}"})

    @hprm.reaction(triggers="fib_feedback", effects="fib_cancel")
    def feedback(self, ctx):
        fb = ctx.get(self.fib_feedback)
        self.record("fib_feedback", fb)
        long_goal = [f for f in self.got["fib_feedback"] if f["goal_id"] == fb["goal_id"]]
        if self.fib_sent == 2 and not self.fib_canceled and len(long_goal) == 2:
            self.fib_canceled = True
            ctx.set(self.fib_cancel, fb["goal_id"])

    @hprm.reaction(triggers="fib_result", effects="fib_goal")
    def result(self, ctx):
        self.record("fib_result", ctx.get(self.fib_result))
        if self.fib_sent == 1:
            self.fib_sent = 2
            ctx.set(self.fib_goal, {"order": 1000})

    @hprm.reaction(triggers="served_goal", effects="step")
    def goal(self, ctx):
        g = ctx.get(self.served_goal)
        self.record("served_goal", g)
        self.serving[g["goal_id"]] = (g["goal"]["order"], [0, 1])
        self.step.schedule(g["goal_id"], "100ms")

    @hprm.reaction(triggers="step", effects=["served_feedback", "served_result", "step"])
    def advance(self, ctx):
        gid = ctx.get(self.step)
        if gid not in self.serving:
            return
        order, seq = self.serving[gid]
        seq.append(seq[-1] + seq[-2])
        if len(seq) > order:
            del self.serving[gid]
            ctx.set(self.served_result, {"goal_id": gid, "result": {"sequence": seq}})
        else:
            ctx.set(self.served_feedback, {"goal_id": gid, "feedback": {"sequence": seq}})
            self.step.schedule(gid, "100ms")

    @hprm.reaction(triggers="served_cancel", effects="served_result")
    def cancel(self, ctx):
        c = ctx.get(self.served_cancel)
        self.record("served_cancel", c)
        if c["goal_id"] in self.serving:
            _, seq = self.serving.pop(c["goal_id"])
            ctx.set(self.served_result, {"goal_id": c["goal_id"], "status": "canceled", "result": {"sequence": seq}})

    @hprm.reaction(triggers="gain")
    def parameter(self, ctx):
        self.record("gain", ctx.get(self.gain))


prog = hprm.Program("ros2_bridge_interfaces", timeout=args.timeout)
ros = prog.federate("ros", hprm.external(inputs=TO_ROS, outputs=FROM_ROS))
app = prog.federate("app", App)
for p in FROM_ROS:
    prog.connect(getattr(ros, p), getattr(app, p))
for p in TO_ROS:
    # "after 0" (one microstep): ros -> app -> ros is no zero-delay cycle.
    prog.connect(getattr(app, p), getattr(ros, p), after="0ms")

if __name__ == "__main__":
    prog.launch(commands={"ros": [args.bridge, "--config", args.config]})
