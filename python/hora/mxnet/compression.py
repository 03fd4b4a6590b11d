"""Gradient compression for ``DistributedTrainer``, as in ``horovod.mxnet``:
``Compression.none`` (the default) and ``Compression.fp16``."""

import numpy as np

from hora.common.compression import (  # noqa: F401
    Compressor,
    NoneCompressor,
    compression_algorithms,
    fp16_compressor,
)

FP16Compressor = fp16_compressor(lambda dtype: np.issubdtype(dtype, np.floating),
                                 lambda tensor, dtype: tensor.astype(dtype, copy=False), np.float16)
Compression = compression_algorithms(FP16Compressor, "``DistributedTrainer``")
