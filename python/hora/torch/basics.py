"""Lifecycle, topology and build queries of ``hora.torch``, with Horovod's names."""

import json

from hora.common import basics as _basics
from hora.common.basics import (  # noqa: F401
    cross_rank,
    cross_size,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    shutdown,
    size,
)


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
