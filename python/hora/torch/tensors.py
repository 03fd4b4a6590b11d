"""Torch tensors across the core boundary.

Contiguous CPU tensors reach the core through DLPack without a copy; other
layouts are made contiguous first. Outputs the core allocates (allgather,
alltoall) come back as tensors that share the core's memory.
"""

import numpy as np
import torch

from hora.common import ops as _ops

# The NumPy dtype through which a core-allocated output is viewed. bfloat16
# has no NumPy dtype: its bytes travel as float16 (same width) and are
# reinterpreted as bfloat16 on the torch side, still without a copy.
_NUMPY_VIEW = {
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.bfloat16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.bool: np.bool_,
}

SUPPORTED = "uint8, int8, int32, int64, float16, bfloat16, float32, float64, bool"


def check(tensor, what="tensor"):
    """Raises ValueError unless ``tensor`` is a dense CPU tensor of a dtype hora moves."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what} is on {tensor.device}; this build of hora moves CPU tensors only "
                         "(call .cpu() first)")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what} has layout {tensor.layout}; only dense tensors can be reduced "
                         "(sparse gradients go through sparse_allreduce_async)")
    if tensor.dtype not in _NUMPY_VIEW:
        raise ValueError(f"{what} has dtype {tensor.dtype}, which hora does not support; supported: {SUPPORTED}")


def as_input(tensor, what="tensor"):
    """A contiguous tensor sharing ``tensor``'s memory when it can (no autograd history)."""
    check(tensor, what)
    tensor = tensor.detach()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def new_output(tensor):
    """A fresh contiguous tensor shaped like ``tensor``."""
    return torch.empty(tensor.shape, dtype=tensor.dtype)


def in_place_target(tensor, what="tensor"):
    """For in-place ops: the buffer the core writes and a function that makes
    ``tensor`` hold the result. Contiguous tensors are written directly."""
    check(tensor, what)
    data = tensor.detach()
    if data.is_contiguous():
        return data, lambda: tensor
    buffer = data.contiguous()

    def copy_back():
        with torch.no_grad():
            tensor.copy_(buffer)
        return tensor

    return buffer, copy_back


def core_output(work, dtype):
    """The output the core allocated for ``work`` as a tensor of ``dtype`` (no copy)."""
    array = _ops.output_of(work, _NUMPY_VIEW[dtype])
    result = torch.from_numpy(array)
    return result.view(dtype) if dtype == torch.bfloat16 else result


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def dtype_from_name(name):
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dtype
