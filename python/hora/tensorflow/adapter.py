"""TensorFlow tensors across the core boundary (see hora.common.adapters.Adapter).

Eager tensors reach the core through DLPack without a copy. TensorFlow
tensors are immutable, so outputs are fresh tensors (``tf.raw_ops.Empty``)
that the core writes through DLPack before anyone else sees them; outputs
the core allocates itself (allgather, alltoall) are copied into a tensor.
Nothing here runs inside a graph: ``hora.tensorflow.mpi_ops`` brings graph
tensors here through ``tf.py_function``, where they are eager.
"""

import numpy as np
import tensorflow as tf

from hora.common.adapters import Adapter
from hora.common.ops import Collectives, split_list

# tf.DType -> hora's element type name.
_DTYPE_NAMES = {
    tf.uint8: "uint8",
    tf.int8: "int8",
    tf.uint16: "uint16",
    tf.int16: "int16",
    tf.int32: "int32",
    tf.int64: "int64",
    tf.float16: "float16",
    tf.bfloat16: "bfloat16",
    tf.float32: "float32",
    tf.float64: "float64",
    tf.bool: "bool",
}


def converted(value, what):
    """``value`` (not a tensor) made a tf.Tensor; ValueError naming ``what``
    when TensorFlow cannot convert it."""
    if isinstance(value, (str, bytes, dict, set)) or value is None:
        raise ValueError(f"{what} must be a tf.Tensor (or something tf.convert_to_tensor takes), "
                         f"got {type(value).__name__}")
    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what} must be a tf.Tensor, and a {type(value).__name__} cannot be made "
                         f"one: {error}") from None


class TensorFlowAdapter(Adapter):
    """Dense eager tensors and variables of any dtype in ``_DTYPE_NAMES``;
    NumPy arrays, Python numbers and nested lists are converted with
    ``tf.convert_to_tensor``. Any thread; stateless."""

    name = "tensorflow"
    tensor_types = (tf.Tensor, tf.Variable)

    def check(self, tensor, what):
        if isinstance(tensor, tf.Variable):
            tensor = tensor.read_value()
        elif isinstance(tensor, (tf.IndexedSlices, tf.SparseTensor)):
            raise ValueError(f"{what} is a {type(tensor).__name__}; only dense tensors are moved here "
                             "(allreduce takes IndexedSlices)")
        elif not isinstance(tensor, tf.Tensor):
            tensor = converted(tensor, what)
        if not hasattr(tensor, "numpy"):
            raise ValueError(f"{what} is a graph tensor; hora moves eager tensors (inside tf.function the "
                             "hora.tensorflow functions run their ops through tf.py_function)")
        if "GPU" in tensor.device.upper():
            with tf.device("/cpu:0"):
                tensor = tf.identity(tensor)
        return tensor

    def dtype_name(self, tensor):
        return _DTYPE_NAMES.get(tensor.dtype) or tensor.dtype.name

    def shape(self, tensor):
        return tuple(tensor.shape)

    def buffer(self, tensor):
        return tensor  # an eager tensor exports itself through __dlpack__

    def empty(self, shape, like):
        return tf.raw_ops.Empty(shape=tf.constant(shape, dtype=tf.int32), dtype=like.dtype, init=False)

    def in_place_target(self, tensor, what):
        raise ValueError(f"{what} is a TensorFlow tensor, which is immutable; hora.tensorflow has no in-place "
                         "collectives (broadcast_ assigns variables)")

    def from_core(self, array, dtype_name):
        # A copy: the tensor then never holds the core's memory (nor the op).
        if dtype_name == "bfloat16":
            return tf.bitcast(tf.constant(array.view(np.uint16)), tf.bfloat16)
        return tf.constant(array)

    def split_values(self, splits):
        if isinstance(splits, tf.Variable):
            splits = splits.read_value()
        if not isinstance(splits, tf.Tensor):
            if isinstance(splits, np.ndarray):
                if splits.dtype.kind not in "iu":
                    raise ValueError(f"alltoall: splits must hold integers, got dtype {splits.dtype}")
                return split_list(splits.reshape(-1).tolist() if splits.ndim == 1 else splits.tolist()), None
            return None
        if not splits.dtype.is_integer:
            raise ValueError(f"alltoall: splits must hold integers, got dtype {splits.dtype.name}")
        if splits.shape.rank != 1:
            raise ValueError(f"alltoall: splits must be 1-D, got shape {splits.shape.as_list()}")
        return split_list(splits.numpy().tolist()), splits.dtype

    def received_splits(self, values, kind):
        return tf.constant(values, dtype=tf.int32 if kind is None else kind)


collectives = Collectives(TensorFlowAdapter())
