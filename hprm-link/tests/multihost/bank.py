"""The program of bank.toml written with hprm.Program: a bank of 4 workers
spread over hosts a and b at the addresses given as arguments.

    hprm launch --host a bank.py ADDRESS_A ADDRESS_B     (and --host b, on host b)
"""

import sys

from reactors import Gather, Source, Worker

import hprm

a, b = sys.argv[1], sys.argv[2]
prog = hprm.Program("bank", timeout="150ms")
prog.host("a", a).host("b", b).rti_on("a")
source = prog.federate("source", Source).on("a")
workers = prog.bank("worker", Worker, 4, hosts=["a", "b"])
gather = prog.federate("gather", Gather).on("b")
prog.connect(source.out, workers.inp, broadcast=True)
prog.connect(workers.out, gather.ins)
prog.launch(store_memory="512m")
