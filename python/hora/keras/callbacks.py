"""``horovod.keras.callbacks``: the callbacks of ``hora.tensorflow.keras``."""

from hora.tensorflow.keras.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
