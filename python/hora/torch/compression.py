"""Gradient compression for allreduce, as in ``horovod.torch``:
``Compression.none`` (the default) and ``Compression.fp16``."""

import torch


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


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and restores their dtype;
    other dtypes travel unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point:
            return tensor.to(ctx)
        return tensor


class Compression:
    """The compression algorithms ``allreduce`` and ``DistributedOptimizer`` accept."""

    none = NoneCompressor
    fp16 = FP16Compressor
