"""Lifecycle and topology: init, shutdown, rank and size queries."""

import atexit
import os
import sys

from hora import _core
from hora.common import elastic as _elastic
from hora.common import interrupts as _interrupts
from hora.common import launchers as _launchers
from hora.common import metrics_http as _metrics_http
from hora.common import monitor as _monitor
from hora.common import mpi as _mpi
from hora.common import process_sets as _process_sets


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
    ranks in it. The backend is chosen by HORA_BACKEND (``gloo`` or ``mpi``;
    Horovod's HOROVOD_CPU_OPERATIONS and HOROVOD_CONTROLLER also work),
    by default MPI under mpirun or srun and Gloo under horarun. Under
    torchrun (or srun with MASTER_ADDR and MASTER_PORT) the job is the one
    torchrun started: WORLD_SIZE ranks (docs/install.md).
    """
    if process_sets is None or process_sets == "dynamic":
        process_sets = []
    sets = list(process_sets)
    for ps in sets:
        if not isinstance(ps, _process_sets.ProcessSet):
            raise ValueError(f"process_sets must hold ProcessSet objects, got {type(ps).__name__}")
    if _core.is_initialized():
        _process_sets.adopt_existing_sets(sets)
        return
    metrics_port = _metrics_http.port_from_environment()
    metrics_address = _metrics_http.address_from_environment()
    mpi_communicator, world_ranks = _mpi.world_arguments(comm)
    _mpi.on_init(comm)
    try:
        _check_timeline_directory()
        initial, ids = _initial_sets(sets)
        if _elastic.in_elastic_job():
            _elastic.join_round()   # this worker's rank and size in the driver's newest round
        elif comm is None:
            _launchers.adopt()      # torchrun's (or srun's) job, when one started this process
        if sets:
            _process_sets.check_initial_sets([ps.ranks for ps in sets], _size_before_init(comm, world_ranks))
        _core.init(initial, mpi_communicator, world_ranks)
        try:
            _process_sets.check_initial_sets([ps.ranks for ps in sets], _core.size())
        except ValueError:
            _core.shutdown()
            raise
    except BaseException:
        _mpi.on_shutdown()
        raise
    _register_shutdown_at_exit()
    _report_uncaught_exceptions()
    _interrupts.install(_core.rank())
    _process_sets._on_init(sets, ids, comm if _mpi.is_communicator(comm) else None)
    _metrics_http.start(metrics_port, _core.local_rank(), metrics_address)
    _monitor.start(_core.rank())


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


def _check_timeline_directory():
    """ValueError when HORA_TIMELINE (HOROVOD_TIMELINE) names a file in a
    directory that does not exist or cannot be written: the timeline would
    record nothing. Every rank checks, as any rank may write a file there."""
    name = next((n for n in ("HORA_TIMELINE", "HOROVOD_TIMELINE") if os.environ.get(n)), None)
    if name is None:
        return
    path = os.environ[name]
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"{name}={path}: the directory {directory} does not exist; create it, or point "
                         f"{name} into an existing directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"{name}={path}: the directory {directory} is not writable")


# Where the core finds the job's size (src/util/env.cc), in its order.
_SIZE_VARIABLES = ("HORA_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_SLURM_SIZE_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")


def _size_before_init(comm, world_ranks):
    """The job's size as the core will find it, or None where it is not
    known before init (the sets are checked again after it)."""
    if world_ranks:
        return len(world_ranks)
    if _mpi.is_communicator(comm):
        return comm.Get_size()
    names = _SIZE_VARIABLES
    if "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ:
        names += _SLURM_SIZE_VARIABLES
    for name in names:
        value = os.environ.get(name, "")
        if value:
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


_shutdown_registered = False
_original_excepthook = None


def _register_shutdown_at_exit():
    # Registered at the first init, after mpi4py's own exit handler if the
    # program imported mpi4py first: exit handlers run last-in first-out, so
    # hora stops its process sets before mpi4py finalizes MPI.
    global _shutdown_registered
    if not _shutdown_registered:
        atexit.register(_shutdown_at_exit)
        _shutdown_registered = True


@_interrupts.quiet_during
def _shutdown_at_exit():
    shutdown()


def _report_uncaught_exceptions():
    # Ctrl-C ends a rank with one line (interrupts.py), also when it arrives
    # while the report of another exception starts. Under MPI a rank that
    # dies of an exception would otherwise wait at exit in MPI_Finalize for
    # peers that wait for it: end the whole job, as mpirun does for a rank
    # that exits with an error. (Nothing is aborted when MPI is not in use.)
    global _original_excepthook
    if _original_excepthook is not None:
        return
    _original_excepthook = sys.excepthook

    @_interrupts.quiet_during
    def hook(kind, value, traceback):
        if not _interrupts.report_uncaught(kind, value, traceback):
            _original_excepthook(kind, value, traceback)
        sys.stdout.flush()
        sys.stderr.flush()
        _core.mpi_abort(1)

    sys.excepthook = hook


def shutdown():
    """Stops every process set of this process. Pending ops fail."""
    _metrics_http.stop()
    _monitor.stop()   # its last report reads the counters, before the core stops
    _core.shutdown()
    _process_sets._on_shutdown()
    _mpi.on_shutdown()


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
    """Whether hora runs on the Gloo backend (False before init)."""
    return _core.is_initialized() and _core.backend() == "gloo"


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
