"""Bad input to hora.torch is refused with a clear error naming what was
wrong, on the rank that gave it (ValueError, before anything is sent) or
on every member when the ranks disagree (MismatchError); nothing hangs and
the sets keep working afterwards. Run on 4 ranks."""

import torch

import hora.torch as hvd
from hora.errors import MismatchError
from checks import raises




hvd.init()
me = hvd.rank()
pair = hvd.add_process_set([0, 1])

# Wrong types.
raises(ValueError, lambda: hvd.allreduce([1.0, 2.0]), "torch.Tensor", "list")
raises(ValueError, lambda: hvd.allgather(None), "torch.Tensor", "NoneType")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), op="sum"), "unknown reduction op 'sum'")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), name=3), "name must be a string")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), prescale_factor="x"), "prescale_factor")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), process_set="pair"), "process_set must be a ProcessSet")
raises(ValueError, lambda: hvd.grouped_allreduce([torch.ones(1), "x"]), "tensor 1 must be a torch.Tensor")
raises(ValueError, lambda: hvd.grouped_allreduce([]), "grouped_allreduce needs at least one tensor")
raises(ValueError, lambda: hvd.grouped_allgather(torch.ones(2)), "grouped_allgather needs a list of tensors")
raises(ValueError, lambda: hvd.grouped_reducescatter_async([]), "needs at least one tensor")
raises(ValueError, lambda: hvd.synchronize(7), "handle")
raises(ValueError, lambda: hvd.remove_process_set("pair"), "ProcessSet or its integer id", "str")
raises(ValueError, lambda: hvd.DistributedOptimizer("sgd"), "torch.optim.Optimizer", "str")
raises(ValueError, lambda: hvd.broadcast_parameters(5, root_rank=0), "invalid params")

# Unsupported tensors and dtypes.
raises(ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)), "complex64", "supported:")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2).to_sparse()), "sparse")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2, device="meta")), "meta", "CPU tensors only")
raises(ValueError, lambda: hvd.allgather(torch.tensor(1.0)), "at least one dimension")
raises(ValueError, lambda: hvd.reducescatter(torch.tensor(1.0)), "at least one dimension")
# Refused on one rank alone, before any tensor of the group is submitted: the
# next (unnamed) reducescatter still pairs up with the other ranks'.
if me == 0:
    raises(ValueError, lambda: hvd.grouped_reducescatter([torch.ones(4), torch.tensor(1.0)]),
           "at least one dimension")
assert torch.equal(hvd.reducescatter(torch.full((4,), 2.0), op=hvd.Sum), torch.full((1,), 8.0))

# Roots.
raises(ValueError, lambda: hvd.broadcast(torch.ones(2), root_rank=4), "root rank 4", "process set 0")
raises(ValueError, lambda: hvd.broadcast(torch.ones(2), root_rank=-1), "root rank -1")
raises(ValueError, lambda: hvd.broadcast(torch.ones(2), root_rank="0"), "root_rank must be an integer")
raises(ValueError, lambda: hvd.broadcast_object(1, root_rank=9), "root rank 9")
if pair.included():
    raises(ValueError, lambda: hvd.broadcast(torch.ones(2), root_rank=2, process_set=pair), "root rank 2",
           "process set")

# Splits.
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([1, 1, 1, 2])), "add up to 5")
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([1, 3])), "2 entries", "4 ranks")
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([2, 2, 1, -1])), "negative")
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.ones(4)), "integers", "float32")
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=torch.ones(2, 2, dtype=torch.int32)), "1-D")
raises(ValueError, lambda: hvd.alltoall(torch.ones(4), splits=[1.5, 1, 1, 0.5]), "integer")
raises(ValueError, lambda: hvd.alltoall(torch.ones(6)), "does not divide")

# Ranks.
raises(ValueError, lambda: hvd.ProcessSet([0, -1]), "-1")
raises(ValueError, lambda: hvd.ProcessSet([1, 1]), "more than once")
raises(ValueError, lambda: hvd.ProcessSet("01"), "integer ranks")
raises(ValueError, lambda: hvd.add_process_set([0, 4]), "rank 4", "size 4")
raises(ValueError, lambda: hvd.add_process_set([]), "at least one rank")
if not pair.included():
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=pair), "not a member")

# Ranks that disagree: every member gets the same error naming the ranks
# and the field; nobody hangs.
raises(MismatchError, lambda: hvd.allreduce(torch.ones(2 + (me == 3)), name="shape"), "'shape'", "shape",
       "[2] on ranks 0, 1, 2", "[3] on rank 3")
dtype = torch.float64 if me == 2 else torch.float32
raises(MismatchError, lambda: hvd.allreduce(torch.ones(2, dtype=dtype), name="dtype"), "'dtype'", "dtype",
       "float64 on rank 2")
raises(MismatchError, lambda: hvd.allreduce(torch.ones(2), op=hvd.Max if me == 0 else hvd.Sum, name="op"),
       "'op'")
raises(MismatchError, lambda: hvd.broadcast(torch.ones(2), root_rank=me % 2, name="root"), "'root'", "root")
if pair.included():
    if me == 0:
        raises(MismatchError, lambda: pair.allreduce(torch.ones(2), name="kind"), "'kind'")
    else:
        raises(MismatchError, lambda: hvd.allgather(torch.ones(2), name="kind", process_set=pair), "'kind'")
# Every set still works.
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), 4.0))
if pair.included():
    assert torch.equal(pair.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), 2.0))

# After shutdown() every op is refused, and init() starts over (under horarun;
# an MPI job refuses to start twice).
on_mpi = hvd.mpi_enabled()
hvd.shutdown()
for fn in (lambda: hvd.allreduce(torch.ones(2)), lambda: hvd.rank(), lambda: hvd.barrier(),
           lambda: hvd.add_process_set([0, 1]), lambda: pair.allreduce(torch.ones(2))):
    raises(ValueError, fn, "not been initialized")
if on_mpi:
    raises(ValueError, hvd.init, "init() after shutdown() is not supported in an MPI job")
else:
    hvd.init()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), 4.0))
print("bad input ok", flush=True)
