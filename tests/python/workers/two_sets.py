"""A rank in two sets issues ops on both, in different orders on different
ranks, and both complete. Run on 4 ranks: A=[0,1,2], B=[1,2,3]."""

import numpy as np

import hora.numpy as hvd

hvd.init()
me = hvd.rank()
a = hvd.ProcessSet([0, 1, 2])
b = hvd.ProcessSet([1, 2, 3])
mine = [s for s in (a, b) if s.included()]
if me == 2:
    mine.reverse()  # rank 1 submits A then B; rank 2 submits B then A
handles = []
for step in range(20):
    for s in mine:
        handles.append((s, hvd.allreduce_async(np.full(8, me + step, np.float32), op=hvd.Sum,
                                               name=f"step{step}", process_set=s)))
for s, h in handles:
    out = hvd.synchronize(h)
    step = int(out[0] - sum(s.ranks)) // len(s.ranks)
    np.testing.assert_array_equal(out, np.full(8, sum(r + step for r in s.ranks), np.float32))
hvd.shutdown()
print("done", flush=True)
