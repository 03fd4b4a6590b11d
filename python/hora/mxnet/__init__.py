"""hora for MXNet 1.9: the API of ``horovod.mxnet`` on process sets.

>>> import hora.mxnet as hvd
>>> hvd.init()
>>> even = hvd.ProcessSet(range(0, hvd.size(), 2))
>>> odd = hvd.ProcessSet(range(1, hvd.size(), 2))
>>> my_set = even if even.included() else odd
>>> hvd.broadcast_parameters(net.collect_params(), root_rank=my_set.ranks[0], process_set=my_set)
>>> trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
...                                  process_set=my_set)

NDArrays cross to the core as NumPy arrays (``asnumpy``) and results come
back as NDArrays on the input's context; nothing is compiled against MXNet.
See docs/frameworks.md.
"""

from hora.common import adapters as _adapters
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
from hora.common.ops import barrier, join  # noqa: F401
from hora.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    process_set_by_id,
    process_sets,
    remove_process_set,
)
from hora.common.telemetry import metrics, start_timeline, stop_timeline  # noqa: F401
from hora.errors import HorovodInternalError  # noqa: F401
from hora.mxnet import mpi_ops as _mpi_ops
from hora.mxnet.compression import Compression  # noqa: F401
from hora.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from hora.mxnet.mpi_ops import (  # noqa: F401
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    allreduce_,
    alltoall,
    broadcast,
    broadcast_,
    grouped_allgather,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_reducescatter,
    reducescatter,
)
from hora.mxnet.training import DistributedOptimizer, DistributedTrainer  # noqa: F401

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "DistributedTrainer", "HorovodInternalError", "Max",
    "Min", "ProcessSet", "Product", "Sum", "add_process_set", "allgather", "allgather_object", "allreduce",
    "allreduce_", "alltoall", "barrier", "broadcast", "broadcast_", "broadcast_object", "broadcast_parameters",
    "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "global_process_set", "gloo_built",
    "gloo_enabled", "grouped_allgather", "grouped_allreduce", "grouped_allreduce_", "grouped_reducescatter", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_size", "metrics", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "process_set_by_id", "process_sets", "rank", "reducescatter",
    "remove_process_set", "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline",
]

# ProcessSet.allreduce(ndarray) and friends take NDArrays to hora.mxnet.mpi_ops.
_adapters.register(_mpi_ops._collectives.adapter, _mpi_ops)
