"""Lifecycle, topology and build queries of ``hora.torch``, with Horovod's names."""

from hora.common.basics import (  # noqa: F401
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
)
from hora.common.telemetry import metrics, start_timeline, stop_timeline  # noqa: F401
