"""One rank raises in the middle of training; the others fail with
PeerFailureError. Run on 4 ranks:

    crash_mid_training.py CRASH_RANK [sets]

Every rank runs a loop of small allreduces (the gradient step of a data
parallel job); at step 5, CRASH_RANK raises RuntimeError. Without ``sets``
the loop runs on the global set, so every other rank fails with
PeerFailureError. With ``sets`` the loop runs on A=[0, 1] or B=[2, 3]: the
other set finishes, and each rank prints ``done`` when it does.
"""

import sys

import numpy as np

import hora.numpy as hvd

STEPS = 40
CRASH_STEP = 5

crash_rank = int(sys.argv[1])
use_sets = len(sys.argv) > 2 and sys.argv[2] == "sets"
a, b = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[a, b] if use_sets else [])
me = hvd.rank()
process_set = (a if a.included() else b) if use_sets else hvd.global_process_set
weights = np.zeros(8)
for step in range(STEPS):
    if me == crash_rank and step == CRASH_STEP:
        raise RuntimeError(f"rank {me}: loss is NaN at step {step}")
    gradient = np.full(8, float(me + step))
    weights -= 0.1 * hvd.allreduce(gradient, name="gradient", process_set=process_set)
print("done", flush=True)
