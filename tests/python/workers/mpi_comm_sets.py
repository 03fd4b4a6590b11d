"""ProcessSet(comm) with mpi4py communicators, at init and later, as in
Horovod. Run on 4 ranks under MPI."""

import numpy as np
from mpi4py import MPI

import hora.numpy as hvd

world = MPI.COMM_WORLD
me = world.rank
halves = world.Split(color=me % 2, key=me)  # [0, 2] on even ranks, [1, 3] on odd ones
by_comm = hvd.ProcessSet(halves)
assert by_comm.mpi_comm is halves and by_comm.ranks is None  # ranks are known after init
# As on Horovod, a copy of the world or of another entry is refused on
# every rank, before any rank waits for another, and hora stays uninitialized.
for duplicates in ([by_comm, hvd.ProcessSet(world.Dup())], [by_comm, hvd.ProcessSet(halves.Dup())],
                   [hvd.ProcessSet(halves), hvd.ProcessSet([2 + me % 2, me % 2])]):
    try:
        hvd.init(comm=world, process_sets=duplicates)
    except ValueError as error:
        assert "duplicate" in str(error), error
    else:
        raise AssertionError(f"init accepted the duplicates {duplicates}")
    assert not hvd.is_initialized()
hvd.init(comm=world, process_sets=[by_comm, hvd.ProcessSet([0])])
assert hvd.mpi_enabled() and hvd.mpi_threads_supported()
assert hvd.global_process_set.mpi_comm is world
# The distinct sets are numbered by position, then rank: evens 1, odds 2, [0] 3.
expected = {0: [0, 2], 1: [1, 3]}[me % 2]
assert by_comm.ranks == expected, by_comm
assert by_comm.process_set_id == (1 if me % 2 == 0 else 2), by_comm
assert hvd.comm_process_set_id(halves) == by_comm.process_set_id
assert hvd.comm_process_set_id(world) == 0
assert sorted(ps.process_set_id for ps in hvd.process_sets()) == [0, 1, 2, 3], hvd.process_sets()
total = by_comm.allreduce(np.array([float(me)]), op=hvd.Sum)
np.testing.assert_array_equal(total, [float(sum(expected))])

# Later: a set from a communicator that only its members hold.
upper = world.Split(color=0 if me >= 1 else MPI.UNDEFINED, key=me)
if upper != MPI.COMM_NULL:
    later = hvd.add_process_set(hvd.ProcessSet(upper))
    assert later.ranks == [1, 2, 3] and later.process_set_id >= 4, later
    np.testing.assert_array_equal(later.allreduce(np.array([me]), op=hvd.Sum), [6])
    # The program's own MPI traffic runs beside hora's.
    assert upper.allreduce(me) == 6
hvd.barrier()
hvd.shutdown()
print("done", flush=True)
