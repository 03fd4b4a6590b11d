"""hora for NumPy arrays, with the names and signatures of ``horovod.torch``.

>>> import hora.numpy as hvd
>>> hvd.init()
>>> even = hvd.ProcessSet(range(0, hvd.size(), 2))
>>> odd = hvd.ProcessSet(range(1, hvd.size(), 2))
>>> my_set = even if even.included() else odd
>>> total = my_set.allreduce(np.ones(3), op=hvd.Sum)
"""

import numpy as np

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
from hora.common.ops import (  # noqa: F401
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    poll,
    synchronize,
)
from hora.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    comm_process_set_id,
    global_process_set,
    process_set_by_id,
    process_sets,
    remove_process_set,
)
from hora.errors import HorovodInternalError  # noqa: F401
from hora.numpy.ops import (  # noqa: F401
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_async,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
)
