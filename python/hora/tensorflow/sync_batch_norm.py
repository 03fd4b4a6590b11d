"""SyncBatchNormalization: Keras batch normalization whose batch statistics
are those of the whole batch over a process set."""

import keras
import tensorflow as tf

from hora.common.core_types import Sum
from hora.common.process_sets import global_process_set
from hora.tensorflow import mpi_ops as _mpi_ops


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` that, in training, normalizes
    with the mean and variance of every member's batch together (sums and
    counts allreduced over ``process_set``, so batches may differ in size;
    gradients flow through the allreduce). Masked inputs, members outside
    the set and sets of one use their own batch."""

    def __init__(self, *args, process_set=global_process_set, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        ps = self.process_set
        if mask is not None or not ps.included() or ps.size() == 1:
            return super()._moments(inputs, mask)
        x = tf.cast(inputs, tf.float32) if inputs.dtype in (tf.float16, tf.bfloat16) else inputs
        axes = list(self._reduction_axes)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        total, total_squares, total_count = _mpi_ops._grouped_allreduce(
            [tf.reduce_sum(x, axis=axes), tf.reduce_sum(tf.square(x), axis=axes), tf.reshape(count, [1])],
            op=Sum, process_set=ps)
        mean = total / total_count
        variance = tf.maximum(total_squares / total_count - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
