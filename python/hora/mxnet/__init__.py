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
from hora.common import api as _api
from hora.common.api import *  # noqa: F401,F403
from hora.common.ops import barrier, join  # noqa: F401
from hora.mxnet import mpi_ops as _mpi_ops
from hora.mxnet.compression import Compression  # noqa: F401
from hora.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from hora.mxnet.mpi_ops import (  # noqa: F401
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

__all__ = _api.__all__ + [
    "Compression", "DistributedOptimizer", "DistributedTrainer", "allgather", "allgather_object", "allreduce",
    "allreduce_", "alltoall", "barrier", "broadcast", "broadcast_", "broadcast_object", "broadcast_parameters",
    "grouped_allgather", "grouped_allreduce", "grouped_allreduce_", "grouped_reducescatter", "join",
    "reducescatter",
]

# ProcessSet.allreduce(ndarray) and friends take NDArrays to hora.mxnet.mpi_ops.
_adapters.register(_mpi_ops._collectives.adapter, _mpi_ops)
