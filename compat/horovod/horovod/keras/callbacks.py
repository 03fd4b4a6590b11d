"""``horovod.keras.callbacks`` on hora."""

from hora.tensorflow.keras.callbacks import *  # noqa: F401,F403
