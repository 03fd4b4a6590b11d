"""``horovod.keras.elastic`` is ``hora.tensorflow.keras.elastic``."""

from hora.tensorflow.keras.elastic import (  # noqa: F401
    CommitStateCallback,
    KerasState,
    ObjectState,
    State,
    UpdateBatchStateCallback,
    UpdateEpochStateCallback,
    run,
)
