"""``horovod.tensorflow.keras`` is ``hora.tensorflow.keras``."""

from hora.tensorflow.keras import *  # noqa: F401,F403
from hora.tensorflow.keras import (  # noqa: F401
    DistributedOptimizer,
    HorovodInternalError,
    PartialDistributedOptimizer,
    allgather,
    allreduce,
    broadcast,
    broadcast_global_variables,
    callbacks,
    load_model,
    reducescatter,
)
