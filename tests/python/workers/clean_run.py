"""A clean run on 4 ranks, for horarun --monitor and --timeline-filename:
sets [0, 1] and [2, 3] run a few steps; ranks 0 and 2 make a set [0, 2],
use it once and remove it (well within one monitor interval); then the
ranks finish at different times, rank r 0.3 * r seconds after rank 0."""

import time

import numpy as np

import hora.numpy as hvd

first, second = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[first, second])
mine = first if first.included() else second
for step in range(5):
    hvd.allreduce(np.ones(16, np.float32), name="grad", process_set=mine)
if hvd.rank() in (0, 2):
    brief = hvd.add_process_set([0, 2])
    hvd.allreduce(np.ones(4, np.float32), name="brief", process_set=brief)
    hvd.remove_process_set(brief)
time.sleep(0.3 * hvd.rank())
hvd.shutdown()
