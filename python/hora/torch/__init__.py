"""hora for PyTorch: the API of ``horovod.torch`` 0.28 on process sets.

>>> import hora.torch as hvd
>>> hvd.init()
>>> even = hvd.ProcessSet(range(0, hvd.size(), 2))
>>> odd = hvd.ProcessSet(range(1, hvd.size(), 2))
>>> my_set = even if even.included() else odd
>>> opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), process_set=my_set)

Contiguous CPU tensors reach the core without a copy (DLPack); the extension
is never compiled against torch. See docs/torch.md.
"""

import sys as _sys

from hora.common import adapters as _adapters
from hora.common.core_types import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hora.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    process_set_by_id,
    process_sets,
    remove_process_set,
)
from hora.errors import HorovodInternalError  # noqa: F401
from hora.torch.autograd import (  # noqa: F401
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from hora.torch.basics import (  # noqa: F401
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
from hora.torch.compression import Compression  # noqa: F401
from hora.torch.functions import (  # noqa: F401
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from hora.torch.mpi_ops import (  # noqa: F401
    allgather_async,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
    barrier,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather_async,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from hora.torch import mpi_ops as _mpi_ops
from hora.torch.optimizer import DistributedOptimizer  # noqa: F401
from hora.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from hora.torch import elastic  # noqa: F401,E402  (hvd.elastic)

__all__ = [
    "Adasum",
    "add_process_set",
    "allgather",
    "allgather_async",
    "allgather_object",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "Average",
    "alltoall",
    "alltoall_async",
    "barrier",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "broadcast_object",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "ccl_built",
    "Compression",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "DistributedOptimizer",
    "elastic",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "grouped_allgather",
    "grouped_allgather_async",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "HorovodInternalError",
    "init",
    "is_homogeneous",
    "is_initialized",
    "join",
    "local_rank",
    "local_size",
    "Max",
    "Min",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "poll",
    "process_set_by_id",
    "process_sets",
    "Product",
    "ProcessSet",
    "rank",
    "reducescatter",
    "reducescatter_async",
    "remove_process_set",
    "rocm_built",
    "shutdown",
    "size",
    "sparse_allreduce_async",
    "start_timeline",
    "stop_timeline",
    "metrics",
    "Sum",
    "SyncBatchNorm",
    "synchronize",
]

# ProcessSet.allreduce(tensor) and friends take torch tensors to this module's
# (differentiable) collectives.
_adapters.register(_mpi_ops.collectives.adapter, _sys.modules[__name__])
