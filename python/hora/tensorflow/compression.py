"""Gradient compression for allreduce, as in ``horovod.tensorflow``:
``Compression.none`` (the default) and ``Compression.fp16``."""

import tensorflow as tf

from hora.common.compression import (  # noqa: F401
    Compressor,
    NoneCompressor,
    compression_algorithms,
    fp16_compressor,
)

FP16Compressor = fp16_compressor(lambda dtype: dtype.is_floating, tf.cast, tf.float16)
Compression = compression_algorithms(FP16Compressor,
                                     "``allreduce``, ``DistributedGradientTape`` and ``DistributedOptimizer``")
