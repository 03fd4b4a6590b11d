"""Lifecycle and topology: init, shutdown, rank and size queries."""

import atexit

from hora import _core
from hora.common import process_sets as _process_sets


def init(comm=None, process_sets=None):
    """Starts hora in this process; every rank of the job calls it.

    ``process_sets`` is a list of ``ProcessSet`` objects (or the string
    ``"dynamic"``, accepted for Horovod compatibility): they get ids 1..k in
    that order, and only their members connect them. ``comm`` selects an MPI
    communicator and needs the MPI backend, which this build does not have.
    """
    if comm is not None:
        raise NotImplementedError("init(comm=...) needs the MPI backend, which this build of hora does not include")
    if process_sets is None or process_sets == "dynamic":
        process_sets = []
    sets = list(process_sets)
    for ps in sets:
        if not isinstance(ps, _process_sets.ProcessSet):
            raise ValueError(f"process_sets must hold ProcessSet objects, got {type(ps).__name__}")
    if _core.is_initialized():
        return
    _core.init([ps.ranks for ps in sets])
    _process_sets._on_init(sets)


def shutdown():
    """Stops every process set of this process. Pending ops fail."""
    _core.shutdown()
    _process_sets._on_shutdown()


def is_initialized():
    return _core.is_initialized()


def size():
    return _core.size()


def rank():
    return _core.rank()


def local_size():
    return _core.local_size()


def local_rank():
    return _core.local_rank()


def cross_size():
    return _core.cross_size()


def cross_rank():
    return _core.cross_rank()


def mpi_built():
    return False


def mpi_enabled():
    return False


def gloo_built():
    return True


def gloo_enabled():
    return _core.is_initialized()


def nccl_built():
    return False


def mpi_threads_supported():
    return False


atexit.register(shutdown)
