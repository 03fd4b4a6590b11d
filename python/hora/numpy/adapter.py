"""NumPy arrays across the core boundary (see hora.common.adapters.Adapter).

Anything ``np.asarray`` takes (lists, scalars) is an input; C-contiguous
arrays reach the core without a copy (buffer protocol / DLPack). Outputs the
core allocates come back as arrays sharing the core's memory.
"""

import numpy as np

from hora.common.adapters import Adapter
from hora.common.ops import split_list

# NumPy kinds of the element types hora moves: bool, signed, unsigned, float.
_BUILT_IN_KINDS = "biuf"
_DTYPE_NAMES = {}  # dtype -> dtype_name(), filled as dtypes are seen


class NumpyAdapter(Adapter):
    """Any thread; stateless."""

    name = "numpy"
    tensor_types = (np.ndarray, np.generic)
    other_inputs = (list, tuple, int, float)

    def check(self, tensor, what):
        try:
            return np.asarray(tensor)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{what} cannot be made a numpy array: {error}") from None

    def dtype_name(self, array):
        dtype = array.dtype
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            # numpy's dtype.name is slow; a repeated op looks it up once.
            name = dtype.name if dtype.kind in _BUILT_IN_KINDS else f"{dtype} (kind {dtype.kind!r})"
            _DTYPE_NAMES[dtype] = name
        return name

    def shape(self, array):
        return tuple(array.shape)

    def buffer(self, array):
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def in_place_target(self, tensor, what):
        if not tensor.flags.writeable:
            raise ValueError(f"{what} is a read-only numpy array; the in-place forms write into it")
        if tensor.flags.c_contiguous:
            return tensor, lambda: tensor
        buffer = np.ascontiguousarray(tensor)

        def copy_back():
            np.copyto(tensor, buffer)
            return tensor

        return buffer, copy_back

    def from_core(self, array, dtype_name):
        return array

    def split_values(self, splits):
        if not isinstance(splits, np.ndarray):
            return None
        if splits.ndim != 1:
            raise ValueError(f"splits must be 1-D, got shape {splits.shape}")
        if splits.dtype.kind not in "iu":
            raise ValueError(f"splits must hold integers, got dtype {splits.dtype}")
        return split_list(splits.tolist()), None

    def received_splits(self, values, kind):
        return np.asarray(values, dtype=np.int64)
