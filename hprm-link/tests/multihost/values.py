"""The program of values.toml written with hprm.Program: hosts a and b at
the addresses given as arguments.

    hprm launch --host a values.py ADDRESS_A ADDRESS_B     (and --host b, on host b)
"""

import sys

from reactors import Receiver, Source

import hprm

a, b = sys.argv[1], sys.argv[2]
prog = hprm.Program("values", timeout="450ms")
prog.host("a", a).host("b", b, link=f"tcp/{b}:7447").rti_on("a")
source = prog.federate("source", Source).on("a")
for name, host in [("left", "b"), ("right", "b"), ("near", "a")]:
    r = prog.federate(name, Receiver, name).on(host)
    prog.connect(source.out, r.inp)
prog.launch(store_memory="512m")
