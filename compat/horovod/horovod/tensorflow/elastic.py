"""``horovod.tensorflow.elastic`` is ``hora.tensorflow.elastic``."""

from hora.tensorflow.elastic import *  # noqa: F401,F403
from hora.tensorflow.elastic import (  # noqa: F401
    HostsUpdatedInterrupt,
    ObjectState,
    State,
    TensorFlowKerasState,
    TensorFlowState,
    run,
)
