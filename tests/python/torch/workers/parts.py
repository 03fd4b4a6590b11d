"""Runs several worker parts in one job (each part is a script in this folder
that calls hvd.init() and leaves the runtime running), then shuts down.

    horarun -np 4 python parts.py collectives gradients
"""

import os
import runpy
import sys

import hora.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))

hvd.init()
for part in sys.argv[1:]:
    runpy.run_path(os.path.join(HERE, f"{part}.py"), run_name="__main__")
    hvd.barrier()
hvd.shutdown()
assert not hvd.is_initialized()
print("parts done", flush=True)
