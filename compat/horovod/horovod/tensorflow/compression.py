"""``horovod.tensorflow.compression`` on hora."""

from hora.tensorflow.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401
