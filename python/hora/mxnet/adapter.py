"""MXNet NDArrays across the core boundary (see hora.common.adapters.Adapter).

Nothing here is compiled against MXNet. An NDArray crosses as the NumPy
array ``asnumpy()`` copies it to (which also waits until MXNet's engine has
written it); the core works on NumPy arrays, and ``hora.mxnet.mpi_ops``
turns its results back into NDArrays on the input's context and writes the
in-place forms' results into their NDArrays.
"""

import mxnet as mx
import numpy as np

from hora.common.adapters import Adapter
from hora.common.ops import Collectives, split_list

# NumPy kinds of the element types hora moves: bool, signed, unsigned, float.
_BUILT_IN_KINDS = "biuf"


def integer_splits(dtype, shape):
    """ValueError unless splits of ``dtype`` and ``shape`` are a 1-D list of integers."""
    if np.dtype(dtype).kind not in "iu":
        raise ValueError(f"alltoall: splits must hold integers, got dtype {np.dtype(dtype).name}")
    if len(shape) != 1:
        raise ValueError(f"alltoall: splits must be 1-D, got shape {tuple(shape)}")


class MXNetAdapter(Adapter):
    """Dense NDArrays (on any context) in, NumPy arrays on the core's side.
    Any thread; stateless."""

    name = "mxnet"
    tensor_types = (mx.nd.NDArray,)

    def check(self, tensor, what):
        if not isinstance(tensor, mx.nd.NDArray):
            raise ValueError(f"{what} must be an mxnet NDArray, got {type(tensor).__name__}")
        if tensor.stype != "default":
            raise ValueError(f"{what} is a {tensor.stype} NDArray; only dense NDArrays are moved "
                             "(call .tostype('default') first)")
        return tensor.asnumpy()

    def dtype_name(self, array):
        dtype = array.dtype
        return dtype.name if dtype.kind in _BUILT_IN_KINDS else f"{dtype} (kind {dtype.kind!r})"

    def shape(self, array):
        return tuple(array.shape)

    def buffer(self, array):
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def in_place_target(self, tensor, what):
        # hora.mxnet.mpi_ops writes in-place results into the NDArray itself.
        raise ValueError(f"{what}: the in-place forms of hora.mxnet write through mpi_ops, not the adapter")

    def from_core(self, array, dtype_name):
        return array

    def split_values(self, splits):
        if isinstance(splits, mx.nd.NDArray):
            integer_splits(splits.dtype, splits.shape)
            return split_list(splits.asnumpy().tolist()), None
        if isinstance(splits, np.ndarray):
            integer_splits(splits.dtype, splits.shape)
            return split_list(splits.tolist()), None
        return None

    def received_splits(self, values, kind):
        return np.asarray(values, dtype=np.int32)


collectives = Collectives(MXNetAdapter())
