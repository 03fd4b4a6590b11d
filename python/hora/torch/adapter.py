"""Torch tensors across the core boundary (see hora.common.adapters.Adapter).

Contiguous CPU tensors reach the core through DLPack without a copy; other
layouts are made contiguous first. Outputs the core allocates (allgather,
alltoall) come back as tensors that share the core's memory.
"""

import torch

from hora.common.adapters import Adapter
from hora.common.ops import split_list

# torch dtype -> hora's element type name.
_DTYPE_NAMES = {
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.uint16: "uint16",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bool: "bool",
}


class TorchAdapter(Adapter):
    """Dense CPU tensors of any dtype in ``_DTYPE_NAMES``. Any thread; stateless."""

    name = "torch"
    tensor_types = (torch.Tensor,)

    def check(self, tensor, what):
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device.type != "cpu":
            raise ValueError(f"{what} is on {tensor.device}; this build of hora moves CPU tensors only "
                             "(call .cpu() first)")
        if tensor.layout != torch.strided:
            raise ValueError(f"{what} has layout {tensor.layout}; only dense tensors can be reduced "
                             "(sparse gradients go through sparse_allreduce_async)")
        return tensor

    def dtype_name(self, tensor):
        return _DTYPE_NAMES.get(tensor.dtype) or str(tensor.dtype).replace("torch.", "")

    def shape(self, tensor):
        return tuple(tensor.shape)

    def buffer(self, tensor):
        tensor = tensor.detach()
        return tensor if tensor.is_contiguous() else tensor.contiguous()

    def empty(self, shape, like):
        return torch.empty(shape, dtype=like.dtype)

    def in_place_target(self, tensor, what):
        data = tensor.detach()
        if data.is_contiguous():
            return data, lambda: tensor
        buffer = data.contiguous()

        def copy_back():
            with torch.no_grad():
                tensor.copy_(buffer)
            return tensor

        return buffer, copy_back

    def from_core(self, array, dtype_name):
        result = torch.from_numpy(array)
        return result.view(torch.bfloat16) if dtype_name == "bfloat16" else result

    def split_values(self, splits):
        if not isinstance(splits, torch.Tensor):
            return None
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError(f"alltoall: splits must hold integers, got dtype {splits.dtype}")
        if splits.dim() != 1:
            raise ValueError(f"alltoall: splits must be 1-D, got shape {list(splits.shape)}")
        return split_list(splits.tolist()), splits.dtype

    def received_splits(self, values, kind):
        return torch.tensor(values, dtype=torch.int32 if kind is None else kind)
