"""``hvd.elastic`` for Keras (``horovod.keras.elastic``,
``horovod.tensorflow.keras.elastic``): ``KerasState`` and the callbacks
that keep it current during ``model.fit`` (docs/elastic.md)."""

import tensorflow as tf

from hora.tensorflow import elastic as _tensorflow
from hora.tensorflow.elastic import *  # noqa: F401,F403
from hora.tensorflow.elastic import ObjectState, TensorFlowKerasState

__all__ = _tensorflow.__all__ + ["CommitStateCallback", "KerasState", "UpdateBatchStateCallback",
                                   "UpdateEpochStateCallback"]

_Callback = tf.keras.callbacks.Callback


class KerasState(TensorFlowKerasState):
    """A Keras model and optimizer plus any attributes (``epoch=0``, ``batch=0``)."""


class CommitStateCallback(_Callback):
    """Commits the state every ``batches_per_commit`` batches, and at the end of each epoch."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be at least 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self._batches = 0

    def on_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches % self.batches_per_commit == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    """Keeps ``state.batch`` at the next batch to run (0 after an epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(_Callback):
    """Keeps ``state.epoch`` at the next epoch to run."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
