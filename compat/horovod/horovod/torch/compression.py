"""``horovod.torch.compression`` on hora."""

from hora.torch.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401
