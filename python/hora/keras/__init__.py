"""hora for Keras: ``horovod.keras``'s API for Keras 3 on the TensorFlow
backend (the same as ``hora.tensorflow.keras``; see there)."""

import keras as _keras

if _keras.backend.backend() != "tensorflow":
    raise ImportError(f"hora.keras runs Keras on the TensorFlow backend; this Keras uses "
                      f"{_keras.backend.backend()!r} (set KERAS_BACKEND=tensorflow)")

from hora.tensorflow.keras import *  # noqa: E402,F401,F403
from hora.tensorflow.keras import __all__  # noqa: E402,F401
