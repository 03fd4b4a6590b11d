"""Lifecycle and topology: init, shutdown, rank and size queries."""

import atexit
import os
import sys

from hora import _core
from hora.common import elastic_rounds as _elastic_rounds
from hora.common import interrupts as _interrupts
from hora.common import launchers as _launchers
from hora.common import metrics_http as _metrics_http
from hora.common import monitor as _monitor
from hora.common import mpi as _mpi
from hora.common import process_sets as _process_sets
from hora.common.config import Config
from hora.common.session import session

__all__ = ["ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "init",
           "is_homogeneous", "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
           "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "shutdown", "size"]


def init(comm=None, process_sets=None):
    """Starts hora in this process; every rank of the job calls it.

    ``process_sets`` is a list of ``ProcessSet`` objects (or the string
    ``"dynamic"``, accepted for Horovod compatibility): they get ids 1..k in
    that order, and only their members connect them. Sets made from mpi4py
    communicators may differ between ranks (a ``Split``): the distinct sets
    are numbered in order of position, then of rank, as Horovod does. As on
    Horovod, a set that duplicates another entry (the same ranks in any
    order) or the global set raises ValueError, and hora stays uninitialized.
    Called again once initialized, init() gives each set it is passed the id
    of the existing set with its ranks (ValueError if there is none).

    ``comm`` makes the job's world an mpi4py communicator, or a list of ranks
    of MPI_COMM_WORLD (only those ranks call init); hora's ranks are then
    ranks in it. The backend is chosen by HORA_BACKEND (``tcp``, hora's own;
    ``gloo``; or ``mpi``; Horovod's HOROVOD_CPU_OPERATIONS and
    HOROVOD_CONTROLLER also work, their ``gloo`` meaning hora's TCP), by
    default MPI under mpirun or srun and hora's TCP under horarun. Under
    torchrun (or srun with MASTER_ADDR and MASTER_PORT) the job is the one
    torchrun started: WORLD_SIZE ranks (docs/install.md).

    The launcher's environment variables are read once, into a
    ``hora.common.config.Config``; ``init_with_config`` takes one instead.
    """
    init_with_config(None, comm, process_sets)


def init_with_config(config, comm=None, process_sets=None):
    """``init(comm, process_sets)`` configured by ``config`` (a
    ``hora.common.config.Config``; None: ``Config.from_environment()``)
    rather than by the environment: an elastic worker's next round, a job
    whose coordinates a program knows (docs/python.md)."""
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"config must be a hora.common.config.Config, got {type(config).__name__}")
    if process_sets is None or process_sets == "dynamic":
        process_sets = []
    sets = list(process_sets)
    for ps in sets:
        if not isinstance(ps, _process_sets.ProcessSet):
            raise ValueError(f"process_sets must hold ProcessSet objects, got {type(ps).__name__}")
    if _core.is_initialized():
        _process_sets.adopt_existing_sets(sets)
        return
    config = config or Config.from_environment()
    mpi_communicator, world_ranks = _mpi.world_arguments(comm)
    _mpi.on_init(comm)
    try:
        _check_timeline_directory(config)
        initial, ids = _initial_sets(sets)
        if config.elastic:
            config = _elastic_rounds.join_round(config)   # this worker's coordinates in the driver's newest round
        elif comm is None:
            config = _launchers.adopt(config)   # torchrun's (or srun's) job, when one started this process
        if sets:
            _process_sets.check_initial_sets([ps.ranks for ps in sets], _size_before_init(comm, world_ranks, config))
        _core.init(initial, mpi_communicator, world_ranks, config.core_settings())
        try:
            _process_sets.check_initial_sets([ps.ranks for ps in sets], _core.size())
        except ValueError:
            _core.shutdown()
            raise
    except BaseException:
        _mpi.on_shutdown()
        raise
    session.config = config
    _register_shutdown_at_exit()
    _report_uncaught_exceptions()
    _interrupts.install(_core.rank())
    _process_sets._on_init(sets, ids, comm if _mpi.is_communicator(comm) else None)
    _metrics_http.start(config.metrics_port, _core.local_rank(), config.metrics_address)
    _monitor.start(_core.rank(), config)


def _initial_sets(sets):
    """(the core's initial sets, the ids of ``sets``). Duplicates are refused
    before any rank waits for another, as on Horovod; a copy of the global
    set, once the job's size is known."""
    if not any(ps.mpi_comm is not None for ps in sets):
        _process_sets.check_initial_sets([ps.ranks for ps in sets])
        return [ps.ranks for ps in sets], list(range(1, len(sets) + 1))
    for ps in sets:
        if ps.mpi_comm is not None:
            ps.ranks = _mpi.communicator_ranks(ps.mpi_comm)
    _process_sets.check_initial_sets([ps.ranks for ps in sets], _mpi.world_size())
    return _mpi.agree_initial_sets([ps.ranks for ps in sets])


def _check_timeline_directory(config):
    """ValueError when HORA_TIMELINE (HOROVOD_TIMELINE) names a file in a
    directory that does not exist or cannot be written: the timeline would
    record nothing. Every rank checks, as any rank may write a file there."""
    if config.timeline is None:
        return
    name, path = config.timeline
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"{name}={path}: the directory {directory} does not exist; create it, or point "
                         f"{name} into an existing directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"{name}={path}: the directory {directory} is not writable")


def _size_before_init(comm, world_ranks, config):
    """The job's size as the core will find it, or None where it is not
    known before init (the sets are checked again after it)."""
    if world_ranks:
        return len(world_ranks)
    if _mpi.is_communicator(comm):
        return comm.Get_size()
    return config.size if config.size is not None else config.launcher_size


def _register_shutdown_at_exit():
    # Registered at the first init, after mpi4py's own exit handler if the
    # program imported mpi4py first: exit handlers run last-in first-out, so
    # hora stops its process sets before mpi4py finalizes MPI.
    if not session.shutdown_registered:
        atexit.register(_shutdown_at_exit)
        session.shutdown_registered = True


@_interrupts.quiet_during
def _shutdown_at_exit():
    _shutdown(goodbye=not session.dying_of_exception)


def _report_uncaught_exceptions():
    # Ctrl-C ends a rank with one line (interrupts.py), also when it arrives
    # while the report of another exception starts. Under MPI a rank that
    # dies of an exception would otherwise wait at exit in MPI_Finalize for
    # peers that wait for it: end the whole job, as mpirun does for a rank
    # that exits with an error. (Nothing is aborted when MPI is not in use.)
    if session.original_excepthook is not None:
        return
    session.original_excepthook = original = sys.excepthook

    @_interrupts.quiet_during
    def hook(kind, value, traceback):
        session.dying_of_exception = True
        _core.quiet_leak_warnings()
        if not _interrupts.report_uncaught(kind, value, traceback):
            original(kind, value, traceback)
        sys.stdout.flush()
        sys.stderr.flush()
        _core.mpi_abort(1)

    sys.excepthook = hook


def shutdown():
    """Stops every process set of this process. Pending ops fail. The other
    members of its sets are told that this rank leaves: for them the sets
    close (ops on them fail naming this rank) rather than break."""
    _shutdown(goodbye=True)


def _shutdown(goodbye):
    _metrics_http.stop()
    _monitor.stop()   # its last report reads the counters, before the core stops
    _core.shutdown(goodbye)
    _process_sets._on_shutdown()
    _mpi.on_shutdown()
    session.config = None


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
    """Whether this build of hora has the MPI backend."""
    return _core.mpi_built()


def mpi_enabled():
    """Whether hora runs on the MPI backend (False before init)."""
    return _core.is_initialized() and _core.backend() == "mpi"


def gloo_built():
    return True


def gloo_enabled():
    """Whether hora runs without MPI between its ranks: on its own TCP or on
    Gloo, what Horovod calls its Gloo mode (False before init)."""
    return _core.is_initialized() and _core.backend() in ("tcp", "gloo")


def nccl_built():
    return False


def mpi_threads_supported():
    """Whether MPI runs with MPI_THREAD_MULTIPLE in this process, so that the
    program may call MPI (mpi4py) alongside hora. False when hora does not
    use MPI. Raises ValueError before init."""
    if not _core.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")
    return _core.mpi_threads_supported()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def is_homogeneous():
    """True: every host runs the same number of ranks (horarun places them so)."""
    return True
