"""Lifecycle, topology and build queries of ``hora.torch``, with Horovod's names."""

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

