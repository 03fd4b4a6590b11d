"""hora for NumPy arrays, with the names and signatures of ``horovod.torch``.

>>> import hora.numpy as hvd
>>> hvd.init()
>>> even = hvd.ProcessSet(range(0, hvd.size(), 2))
>>> odd = hvd.ProcessSet(range(1, hvd.size(), 2))
>>> my_set = even if even.included() else odd
>>> total = my_set.allreduce(np.ones(3), op=hvd.Sum)

Inputs may be anything ``np.asarray`` takes; results are new arrays, except
for the in-place ``*_`` forms, which write into the array they are given.
``alltoall`` returns ``(output, received_splits)``.
"""

from hora.common import adapters as _adapters
from hora.common import api as _api
from hora.common.api import *  # noqa: F401,F403
from hora.common.objects import allgather_object, broadcast_object  # noqa: F401
from hora.common.ops import Collectives as _Collectives
from hora.common.ops import barrier, join, poll, synchronize  # noqa: F401
from hora.numpy.adapter import NumpyAdapter

_collectives = _Collectives(NumpyAdapter())

allreduce = _collectives.allreduce
allreduce_async = _collectives.allreduce_async
allreduce_ = _collectives.allreduce_
allreduce_async_ = _collectives.allreduce_async_
grouped_allreduce = _collectives.grouped_allreduce
grouped_allreduce_async = _collectives.grouped_allreduce_async
grouped_allreduce_ = _collectives.grouped_allreduce_
grouped_allreduce_async_ = _collectives.grouped_allreduce_async_
allgather = _collectives.allgather
allgather_async = _collectives.allgather_async
grouped_allgather = _collectives.grouped_allgather
grouped_allgather_async = _collectives.grouped_allgather_async
broadcast = _collectives.broadcast
broadcast_async = _collectives.broadcast_async
broadcast_ = _collectives.broadcast_
broadcast_async_ = _collectives.broadcast_async_
alltoall = _collectives.alltoall
alltoall_async = _collectives.alltoall_async
reducescatter = _collectives.reducescatter
reducescatter_async = _collectives.reducescatter_async
grouped_reducescatter = _collectives.grouped_reducescatter
grouped_reducescatter_async = _collectives.grouped_reducescatter_async

__all__ = _api.__all__ + [
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "join", "poll", "reducescatter", "reducescatter_async", "synchronize",
]

_adapters.register(_collectives.adapter, _collectives)
