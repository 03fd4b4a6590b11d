"""Two sets train side by side on 4 ranks while a timeline records them.

    timeline.py window OUTDIR     start_timeline at step 2, stop at step 6 of 8;
                                  "late.<set>" is first allreduced at step 3
    timeline.py exception         HOROVOD_TIMELINE set; rank 0 raises at step 3
    timeline.py forever           HOROVOD_TIMELINE set; trains until a signal

Sets A=[0, 1] and B=[2, 3]; each step every member allreduces "grad.<set>"
and "bias.<set>" (asynchronously, so they may fuse) and broadcasts "lr".
Each rank prints ``RESULT <json>``: its metrics of its set.
"""

import json
import os
import sys
import time

import numpy as np

import hora.numpy as hvd

mode = sys.argv[1]
a, b = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[a, b])
mine = a if a.included() else b
tag = "a" if mine is a else "b"


def step(i):
    grad = hvd.allreduce_async(np.full(64, i, np.float32), name=f"grad.{tag}", process_set=mine)
    bias = hvd.allreduce_async(np.ones(4, np.float32), name=f"bias.{tag}", process_set=mine)
    hvd.synchronize(grad)
    hvd.synchronize(bias)
    hvd.broadcast(np.ones(2, np.float64), root_rank=mine.ranks[0], name=f"lr.{tag}", process_set=mine)
    if mode == "window" and i >= 3:
        hvd.allreduce(np.ones(1, np.float32), name=f"late.{tag}", process_set=mine)


if mode == "window":
    path = os.path.join(sys.argv[2], "trace.json")
    for i in range(8):
        if i == 2:
            hvd.start_timeline(path, mark_cycles=True)
        if i == 6:
            hvd.stop_timeline()
        step(i)
elif mode == "exception":
    for i in range(5):
        step(i)
        if i == 3 and hvd.rank() == 0:
            raise RuntimeError("an error in the training loop")
elif mode == "forever":
    print("TRAINING", flush=True)
    while True:
        step(0)
        time.sleep(0.01)
print("RESULT " + json.dumps({"metrics": hvd.metrics(mine)}), flush=True)
