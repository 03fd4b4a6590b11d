"""Gradient compression for allreduce, written once for every front end:
``Compression.none`` (the default) and ``Compression.fp16``. A front end
says how to tell a floating-point dtype and how to cast (fp16_compressor)."""


class Compressor:
    """Turns a tensor into what travels (``compress``, which also returns the
    context ``decompress`` needs) and back."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def fp16_compressor(is_floating, cast, float16):
    """The FP16Compressor of a framework whose dtypes ``is_floating(dtype)``
    tells apart and whose tensors ``cast(tensor, dtype)`` converts."""

    class FP16Compressor(Compressor):
        """Sends floating-point tensors as float16 and restores their dtype;
        other dtypes travel unchanged."""

        @staticmethod
        def compress(tensor):
            if is_floating(tensor.dtype):
                return cast(tensor, float16), tensor.dtype
            return tensor, tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            if ctx is not None and is_floating(ctx):
                return cast(tensor, ctx)
            return tensor

    return FP16Compressor


def compression_algorithms(fp16, accepted_by):
    """The ``Compression`` namespace of a front end."""

    class Compression:
        none = NoneCompressor

    Compression.fp16 = fp16
    Compression.__doc__ = f"The compression algorithms {accepted_by} accept."
    return Compression
