"""init(comm=...) makes a sub-communicator, or some ranks of MPI_COMM_WORLD,
hora's world. Run on 4 ranks under MPI; argv[1] is "split" or "ranks"."""

import sys

import numpy as np
from mpi4py import MPI

import hora.numpy as hvd

world = MPI.COMM_WORLD
me = world.rank
if sys.argv[1] == "split":
    # Two independent hora jobs in one mpirun: the even and the odd ranks.
    halves = world.Split(color=me % 2, key=me)
    hvd.init(comm=halves)
    assert (hvd.rank(), hvd.size()) == (halves.rank, 2), (hvd.rank(), hvd.size())
    assert hvd.local_size() == 2 and hvd.cross_size() == 1
    assert hvd.global_process_set.mpi_comm is halves
    members = [me % 2, me % 2 + 2]
    np.testing.assert_array_equal(hvd.allreduce(np.array([me]), op=hvd.Sum), [sum(members)])
    # A set of one within the sub-world, from a communicator.
    alone = hvd.add_process_set(hvd.ProcessSet(MPI.COMM_SELF))
    assert alone.ranks == [hvd.rank()], alone
    np.testing.assert_array_equal(alone.allreduce(np.array([7])), [7])
    hvd.shutdown()
else:
    # Ranks 1..3 of MPI_COMM_WORLD form the job; rank 0 never starts hora.
    if me != 0:
        hvd.init(comm=[1, 2, 3])
        assert (hvd.rank(), hvd.size()) == (me - 1, 3)
        np.testing.assert_array_equal(hvd.allreduce(np.array([me]), op=hvd.Sum), [6])
        hvd.shutdown()
print("done", flush=True)
