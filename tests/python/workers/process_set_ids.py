"""Process set ids on 4 ranks: the same on members and non-members, the same
on every run, never reused, and a non-member's remove_process_set returns
without error.

argv[1] is "0" or "2": that pair, [0, 1] or [2, 3], creates its set after a
short delay, so two runs with different arguments let a different pair reach
the store first. Every rank prints "ids <list>"; the test compares runs.
"""

import sys
import time

import numpy as np

import hora.numpy as hvd

delayed_pair = int(sys.argv[1])
hvd.init()
me = hvd.rank()
ids = []

# A non-member's add_process_set returns at once: rank 3 adds [0, 1] before
# the barrier that ranks 0 and 1 wait in before adding it.
start = time.monotonic()
early = hvd.add_process_set([0, 1]) if me in (2, 3) else None
assert time.monotonic() - start < 5.0, "a non-member blocked in add_process_set"
hvd.barrier()
if me in (0, 1):
    early = hvd.add_process_set([0, 1])
# Reading the id waits for the members; every rank then sees the same id.
early_ids = hvd.allgather(np.array([early.process_set_id]))
assert early_ids.tolist() == [early.process_set_id] * 4, early_ids
assert early.included() == (me in (0, 1)), early
assert hvd.process_set_by_id(early.process_set_id) is early
ids.append(early.process_set_id)

# Horovod's style: every rank adds every set, in the same order.
even = hvd.add_process_set([0, 2])
odd = hvd.add_process_set([1, 3])
upper = hvd.add_process_set(hvd.ProcessSet([1, 2, 3]))
for ps in (even, odd, upper):
    seen = hvd.allgather(np.array([ps.process_set_id]))
    assert seen.tolist() == [ps.process_set_id] * 4, (ps, seen)
    if ps.included():
        total = ps.allreduce(np.array([float(me)]), op=hvd.Sum)
        np.testing.assert_array_equal(total, [float(sum(ps.ranks))])
    ids.append(ps.process_set_id)
assert str(even) == f"ProcessSet(process_set_id={even.process_set_id}, ranks=[0, 2], mpi_comm=None)", str(even)

# Removal on every rank, as Horovod scripts do it: by object and by id; a
# non-member returns at once without error.
removed_ids = [even.process_set_id, odd.process_set_id, upper.process_set_id, early.process_set_id]
assert hvd.remove_process_set(even) is True
assert hvd.remove_process_set(odd.process_set_id) is True
assert hvd.remove_process_set(upper) is True
assert hvd.remove_process_set(early) is True
for ps in (even, odd, upper, early):
    assert ps.process_set_id is None, ps
assert hvd.remove_process_set(even) is False  # already removed
assert hvd.remove_process_set(hvd.global_process_set) is False
if me in (0, 2):
    try:
        even.allreduce(np.ones(1))
        raise AssertionError("a removed set was usable")
    except ValueError as error:
        assert "has been removed" in str(error), error

# Never reused: the same ranks again get new ids.
again = hvd.add_process_set([0, 2])
assert again.process_set_id not in removed_ids, (again, removed_ids)
ids.append(again.process_set_id)
hvd.remove_process_set(again)

# Members only, concurrently: [0, 1] and [2, 3] are created by their own
# members at the same time; one pair starts late.
hvd.barrier()
if me // 2 * 2 == delayed_pair:
    time.sleep(0.3)
pair = hvd.add_process_set([0, 1] if me < 2 else [2, 3])
ids.append(pair.process_set_id)
pair.allreduce(np.ones(1))
ids_of_pairs = hvd.allgather(np.array([pair.process_set_id]))
ids.append(sorted(set(ids_of_pairs.tolist())))
assert len(ids[-1]) == 2, ids_of_pairs

hvd.barrier()
hvd.shutdown()
print(f"ids {ids}", flush=True)
