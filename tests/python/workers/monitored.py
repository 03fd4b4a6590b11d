"""Known traffic for horarun --monitor, on 4 ranks: process set 1 = [0, 1]
runs 40 allreduces of 1 KiB and set 2 = [2, 3] 30 of 4 KiB, a step every
50 ms; then every rank runs 3 allreduces of 16 bytes on the global set."""

import time

import numpy as np

import hora.numpy as hvd

STEPS = {1: (40, 256), 2: (30, 1024)}   # set id -> (ops, float32 elements)

first, second = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[first, second])
mine = first if first.included() else second
count, elements = STEPS[mine.process_set_id]
for step in range(count):
    hvd.allreduce(np.ones(elements, np.float32), name="grad", process_set=mine)
    time.sleep(0.05)
for step in range(3):
    hvd.allreduce(np.ones(4, np.float32), name="sync")
hvd.shutdown()
