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
from hora.common import api as _api
from hora.common.api import *  # noqa: F401,F403
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

__all__ = _api.__all__ + [
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "Compression",
    "DistributedOptimizer", "elastic", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "join", "poll", "reducescatter", "reducescatter_async",
    "sparse_allreduce_async", "SyncBatchNorm", "synchronize",
]

# ProcessSet.allreduce(tensor) and friends take torch tensors to this module's
# (differentiable) collectives.
_adapters.register(_mpi_ops.collectives.adapter, _sys.modules[__name__])
