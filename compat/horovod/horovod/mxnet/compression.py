"""``horovod.mxnet.compression`` on hora."""

from hora.mxnet.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401
