"""Gradient compression for allreduce, as in ``horovod.torch``:
``Compression.none`` (the default) and ``Compression.fp16``."""

import torch

from hora.common.compression import (  # noqa: F401
    Compressor,
    NoneCompressor,
    compression_algorithms,
    fp16_compressor,
)

FP16Compressor = fp16_compressor(lambda dtype: dtype.is_floating_point, lambda t, dtype: t.to(dtype), torch.float16)
Compression = compression_algorithms(FP16Compressor, "``allreduce`` and ``DistributedOptimizer``")
