"""``horovod.keras`` is ``hora.keras`` (Keras 3 on the TensorFlow backend)."""

from hora.keras import *  # noqa: F401,F403
from hora.keras import (  # noqa: F401
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
