"""Ranks blocked in a collective, for Ctrl-C tests. Run on 2 or 4 ranks:

    blocked.py diverged     every rank waits in an allreduce of its own name
                            (the ranks diverged: none can complete)
    blocked.py one-sleeps   rank 1 sleeps in Python; the others wait for it
                            in an allreduce, through a handle
    blocked.py in-library   every rank computes in a library's Python code
                            (the standard library's statistics module),
                            holding a handle of an op that never completes

Each rank prints ``pid <pid>`` once it waits (or just before).
"""

import os
import sys
import time

import numpy as np

import hora.numpy as hvd

mode = sys.argv[1]
hvd.init()
me = hvd.rank()
hvd.allreduce(np.ones(2), name="warm-up")
print(f"pid {os.getpid()}", flush=True)
if mode == "diverged":
    hvd.allreduce(np.ones(2), name=f"step.rank{me}")
elif mode == "in-library":
    import statistics
    import threading

    pending = hvd.allreduce_async(np.ones(2), name=f"never.rank{me}")

    def hold(handle):   # a daemon thread keeps the handle alive past the interpreter's end
        threading.Event().wait()

    threading.Thread(target=hold, args=(pending,), daemon=True).start()
    values = list(range(200_000))
    while True:
        statistics.pvariance(values)
elif me == 1:
    time.sleep(60)
else:
    hvd.synchronize(hvd.allreduce_async(np.ones(2), name="step"))
