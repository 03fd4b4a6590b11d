"""Bad input and misuse raise clear errors, never hang. Run on 4 ranks."""

import time

import numpy as np

import hora.numpy as hvd
from checks import raises
from hora.errors import HorovodInternalError, MismatchError


hvd.init()
me = hvd.rank()

# Invalid ranks.
raises(ValueError, lambda: hvd.ProcessSet([-1]), "-1")
raises(ValueError, lambda: hvd.ProcessSet([0, 0]), "more than once")
raises(ValueError, lambda: hvd.ProcessSet(["a"]), "rank 'a' is not an integer")
raises(ValueError, lambda: hvd.add_process_set([0, 7]), "rank 7", "size 4")

# A non-member's op is refused at once.
pair = hvd.ProcessSet([0, 1])
if not pair.included():
    raises(ValueError, lambda: pair.allreduce(np.ones(2)), "not a member")

# Mismatched shapes: every member gets an error naming both sides.
shape = 3 if me == 1 else 2
message = raises(MismatchError, lambda: hvd.allreduce(np.ones(shape), name="grad"), "'grad'", "shape",
                 "[2] on ranks 0, 2, 3", "[3] on rank 1")
assert isinstance(MismatchError("x"), HorovodInternalError)
# Mismatched dtype in a smaller set, and the set still works afterwards.
if pair.included():
    dtype = np.float32 if me == 0 else np.float64
    raises(MismatchError, lambda: pair.allreduce(np.ones(2, dtype), name="w"), "dtype", "float32 on rank 0",
           "float64 on rank 1")
    np.testing.assert_array_equal(pair.allreduce(np.ones(2), op=hvd.Sum), [2.0, 2.0])

# Bad arguments to ops.
raises(ValueError, lambda: hvd.broadcast(np.ones(2), root_rank=9), "root rank 9")
raises(ValueError, lambda: hvd.alltoall(np.ones(4), splits=[1, 1, 1]), "splits has 3 entries")
raises(ValueError, lambda: hvd.alltoall(np.ones(4), splits=[1, 1, 1, 2]), "add up to 5")
raises(ValueError, lambda: hvd.alltoall(np.ones(5)), "does not divide")
raises(ValueError, lambda: hvd.allgather(np.float32(1.0)), "at least one dimension")
raises(ValueError, lambda: hvd.allreduce(np.array(["x"])), "unsupported dtype")
raises(ValueError, lambda: hvd.allreduce(np.ones(2, dtype=np.int64), op=hvd.Adasum), "Adasum")
raises(ValueError, lambda: hvd.allreduce([1.0], op="Sum"), "unknown reduction op")
raises(ValueError, lambda: hvd.allreduce_([1.0, 2.0]), "in-place", "list")
raises(ValueError, lambda: hvd.alltoall(np.ones(4), splits=np.ones((2, 2), dtype=np.int64)), "1-D")
raises(ValueError, lambda: hvd.alltoall(np.ones(4), splits=np.ones(4)), "integers")
raises(ValueError, lambda: hvd.synchronize("nope"), "handle")

# A second op under a name this rank has in flight is refused at once; the
# first op and the set are unaffected.
if me == 0:
    first = hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup")
    raises(ValueError, lambda: hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup"), "'dup'",
           "already has an op of that name in flight")
hvd.barrier()  # rank 0's "dup" cannot finish before the others submit theirs
if me != 0:
    first = hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup")
np.testing.assert_array_equal(hvd.synchronize(first), [4.0, 4.0])
# Horovod's own tests: the others submit "dup2" (rank 0's has waited for
# them) and at once again, dropping the first handle. However fast the first
# op finished, this rank has not seen it finish: the second is refused.
if me == 0:
    held = hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup2")
hvd.barrier()
if me != 0:
    hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup2")
    time.sleep(0.2)  # the op has finished by now
    raises(ValueError, lambda: hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="dup2"), "'dup2'", "in flight")
else:
    hvd.synchronize(held)
hvd.barrier()  # another op since "dup2" finished: the name is free again
np.testing.assert_array_equal(hvd.allreduce(np.ones(2), op=hvd.Sum, name="dup2"), [4.0, 4.0])

# add / remove / re-add.
added = hvd.add_process_set([0, 1])
if me not in (0, 1):  # printing a non-member's set does not wait for its id
    assert str(added) == "ProcessSet(process_set_id=None, ranks=[0, 1], mpi_comm=None)", added
# Every rank reads the same id, although ranks 0 and 1 registered `pair`
# over the same ranks on first use above.
every_id = hvd.allgather(np.array([added.process_set_id], dtype=np.int64), name="added.id")
assert len(set(every_id.tolist())) == 1, every_id
if me in (0, 1):
    assert added.process_set_id is not None and added.process_set_id > 0, added
    raises(ValueError, lambda: hvd.add_process_set(added), "already registered")
    np.testing.assert_array_equal(added.allreduce(np.full(2, me), op=hvd.Sum), [1, 1])
    old_id = added.process_set_id
    assert hvd.remove_process_set(added) is True
    assert added.process_set_id is None
    raises(ValueError, lambda: added.allreduce(np.ones(2)), f"process set {old_id} has been removed")
    again = hvd.add_process_set(hvd.ProcessSet([0, 1]))
    assert again.process_set_id > old_id, (again, old_id)
    np.testing.assert_array_equal(again.allreduce(np.full(2, me), op=hvd.Sum), [1, 1])
    assert hvd.remove_process_set(again.process_set_id) is True
else:
    # Non-members neither block nor register; they read the members' id.
    raises(ValueError, lambda: hvd.add_process_set(added), "already registered")
    assert added.process_set_id > 0, added
    assert hvd.remove_process_set(added) is True and added.process_set_id is None
assert hvd.remove_process_set(hvd.global_process_set) is False

hvd.barrier()
hvd.shutdown()
raises(ValueError, lambda: hvd.allreduce(np.ones(2)), "not been initialized")
print("done", flush=True)
