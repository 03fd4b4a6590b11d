"""Sets given to init() get ids 1..k in order; only members connect them."""

import numpy as np

import hora.numpy as hvd

first = hvd.ProcessSet([2, 3])
second = hvd.ProcessSet([0, 1, 2])
hvd.init(process_sets=[first, second])
assert hvd.global_process_set.process_set_id == 0
assert (first.process_set_id, second.process_set_id) == (1, 2), (first, second)
assert str(first) == "ProcessSet(process_set_id=1, ranks=[2, 3], mpi_comm=None)", str(first)
assert hvd.global_process_set.ranks == [0, 1, 2, 3]
me = hvd.rank()
for ps in (first, second):
    assert ps.size() == len(ps.ranks)
    assert ps.included() == (me in ps.ranks)
    assert ps.rank() == (ps.ranks.index(me) if me in ps.ranks else -1)
    if ps.included():
        np.testing.assert_array_equal(ps.allreduce(np.array([me]), op=hvd.Sum), [sum(ps.ranks)])
# A dynamic set after them gets a fresh id.
dynamic = hvd.ProcessSet([1, 3])
if dynamic.included():
    dynamic.allreduce(np.ones(1))
    assert dynamic.process_set_id >= 3, dynamic
hvd.shutdown()
print("done", flush=True)
