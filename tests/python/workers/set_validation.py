"""Process sets are checked on every rank, members or not, and duplicate
sets are refused as on Horovod. Run on 4 ranks."""

import numpy as np

import hora.numpy as hvd
from checks import raises


# What needs no job size is checked at once.
raises(ValueError, lambda: hvd.ProcessSet([]), "ProcessSet([])", "at least one rank")
raises(ValueError, lambda: hvd.ProcessSet([1, 1.5]), "ProcessSet([1, 1.5])", "rank 1.5 is not an integer")
raises(ValueError, lambda: hvd.ProcessSet([0, True]), "rank True is not an integer")
raises(ValueError, lambda: hvd.ProcessSet([2, -1]), "ProcessSet([2, -1])", "rank -1 is negative")
raises(ValueError, lambda: hvd.ProcessSet([3, 1, 3]), "ProcessSet([3, 1, 3])", "rank 3 appears more than once")

# init() refuses duplicates (the same ranks in any order, or every rank)
# and ranks outside the job, and leaves hora uninitialized.
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 0])]),
       "entry number 1", "duplicate of entry number 0")
assert not hvd.is_initialized()
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet([0]), hvd.ProcessSet([3, 2, 1, 0])]),
       "entry number 1", "duplicate of the global process set")
assert not hvd.is_initialized()
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet([0, 7])]), "process set [0, 7]", "rank 7",
       "out of range for a job of size 4")
assert not hvd.is_initialized()

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
me = hvd.rank()
assert pair.process_set_id == 1, pair

# Once the job's size is known, every rank checks the range, members or not.
raises(ValueError, lambda: hvd.ProcessSet([0, 7]), "ProcessSet([0, 7])", "rank 7", "out of range for a job of size 4")
raises(ValueError, lambda: hvd.add_process_set([0, 4]), "rank 4", "out of range")

# add_process_set refuses a set that exists, on members and non-members alike.
raises(ValueError, lambda: hvd.add_process_set([1, 0]), "duplicate process set", "[0, 1]")
raises(ValueError, lambda: hvd.add_process_set(range(4)), "duplicate process set", "global process set")
upper = hvd.add_process_set([2, 3])
raises(ValueError, lambda: hvd.add_process_set(hvd.ProcessSet([3, 2])), "duplicate process set", "[2, 3]")

# init() again gives a copy the existing set's id.
copy = hvd.ProcessSet([1, 0])
hvd.init(process_sets=[copy])
assert copy.process_set_id == pair.process_set_id, (copy, pair)
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet([1, 2])]), "no process set [1, 2]")

# A removed set may be added again.
assert hvd.remove_process_set(upper) is True
again = hvd.add_process_set([3, 2])
if again.included():
    np.testing.assert_array_equal(again.allreduce(np.array([me]), op=hvd.Sum), [5])
hvd.barrier()
hvd.shutdown()
print("done", flush=True)
