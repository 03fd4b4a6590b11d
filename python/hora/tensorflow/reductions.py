"""``allreduce``, ``grouped_allreduce``, ``reducescatter`` and
``grouped_reducescatter`` as ``horovod.tensorflow`` defines them: compression,
Horovod's default reductions (Average), and ``tf.IndexedSlices`` reduced by
allgathering their values and indices.

``device_dense``, ``device_sparse`` and ``ignore_name_scope`` are accepted
for compatibility; hora moves tensors through host memory.
"""

import tensorflow as tf

from hora.common import core_types as _types
from hora.common.core_types import Adasum, Average, Sum
from hora.common.ops import tensor_list
from hora.common.process_sets import global_process_set
from hora.tensorflow import mpi_ops as _mpi_ops
from hora.tensorflow.compression import Compression


def _set(process_set):
    return global_process_set if process_set is None else process_set


def _check_sparse_op(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction does not support sparse tensors (tf.IndexedSlices); pass "
                                  "sparse_as_dense=True to DistributedOptimizer / DistributedGradientTape")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _sparse_allreduce(slices, op, process_set):
    """``slices`` reduced over the set: every member's values and indices
    gathered (duplicates add up when applied), values averaged for Average."""
    ps = _set(process_set)
    values, indices = _mpi_ops.grouped_allgather([slices.values, slices.indices], process_set=ps)
    if op == Average:
        values = values / tf.cast(ps.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces ``tensor`` (a tf.Tensor, tf.Variable or tf.IndexedSlices) over
    the set (default: Average) and returns the result. Differentiable."""
    op = _types.resolve_reduce_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op, prescale_factor, postscale_factor)
        return _sparse_allreduce(tensor, op, process_set)
    tensor = _mpi_ops.tensor_of(tensor)
    compressed, ctx = compression.compress(tensor)
    reduced = _mpi_ops._allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces each tensor of the list (IndexedSlices allowed) in one
    submission; returns the list of results. Differentiable."""
    if isinstance(tensors, (list, tuple)) and not tensors:
        return list(tensors)
    tensors = tensor_list(tensors, "grouped_allreduce", (tf.Tensor, tf.Variable, tf.IndexedSlices), "tensor")
    op = _types.resolve_reduce_op(op, average)
    results = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i in range(len(tensors)) if i not in sparse]
    if sparse:
        _check_sparse_op(op, prescale_factor, postscale_factor)
        for i in sparse:
            results[i] = _sparse_allreduce(tensors[i], op, process_set)
    if dense:
        checked = [_mpi_ops.tensor_of(tensors[i], f"tensor {i}") for i in dense]
        compressed, ctxs = zip(*[compression.compress(t) for t in checked])
        reduced = _mpi_ops._grouped_allreduce(list(compressed), name=name, op=op, prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor, process_set=process_set)
        for i, t, ctx in zip(dense, reduced, ctxs):
            results[i] = compression.decompress(t, ctx)
    return results


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces ``tensor`` over the set (Sum or Average) and returns this
    member's block of rows. Differentiable."""
    tensor = _mpi_ops.tensor_of(tensor)
    compressed, ctx = compression.compress(tensor)
    reduced = _mpi_ops._reducescatter(compressed, name=name, op=op, process_set=process_set,
                                      prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters each tensor of the list; returns the list of blocks. Differentiable."""
    if isinstance(tensors, (list, tuple)) and not tensors:
        return list(tensors)
    tensors = _mpi_ops.tensor_list_of(tensors, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = _mpi_ops._grouped_reducescatter(list(compressed), op=op, process_set=process_set,
                                              prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]
