"""Lifecycle, topology and build queries of ``hora.torch``, with Horovod's names."""

import atexit
import json

from hora.common import basics as _basics
from hora.common.basics import (  # noqa: F401
    cross_rank,
    cross_size,
    gloo_built,
    gloo_enabled,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    size,
)
from hora.torch import join_protocol as _join


# How long shutdown() waits for announcements still in flight.
SHUTDOWN_DRAIN_SECONDS = 10.0
_drain_registered = False


def init(comm=None, process_sets=None):
    """Starts hora in this process; every rank of the job calls it.
    ``process_sets`` (a list of ``ProcessSet``) get ids 1..k in that order."""
    _basics.init(comm, process_sets)
    _join.reset()
    global _drain_registered
    if not _drain_registered:
        # Registered after hora's own exit handler, so it runs before it.
        atexit.register(lambda: _basics.is_initialized() and _join.drain(SHUTDOWN_DRAIN_SECONDS))
        _drain_registered = True


def shutdown():
    """Stops every process set of this process; pending ops fail (after a
    short wait for hora.torch's own announcements, see join_protocol.drain)."""
    if _basics.is_initialized():
        _join.drain(SHUTDOWN_DRAIN_SECONDS)
    _basics.shutdown()
    _join.reset()


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


def start_timeline(file_path, mark_cycles=False):
    """Starts recording a Chrome-trace timeline into ``file_path`` (rank 0
    writes it). This build records no events yet: the file is a valid,
    empty trace."""
    if not _basics.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")
    if _basics.rank() == 0:
        with open(file_path, "w") as f:
            json.dump({"traceEvents": [], "displayTimeUnit": "ms"}, f)


def stop_timeline():
    """Stops the timeline started by ``start_timeline``."""
    if not _basics.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")
