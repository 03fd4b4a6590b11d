"""The collectives of ``hora.mxnet``, with the names and signatures of
``horovod.mxnet.mpi_ops``.

Every op takes ``process_set=`` (default: the global set) and Horovod's
``priority`` (accepted; hora runs a set's ops in the order they are
submitted). Results are new NDArrays on the input's context; the ``*_``
forms write the result into the NDArray they are given and return it.
Every call returns once its result is ready (MXNet's engine is already
asynchronous, and horovod.mxnet has no handles either).
"""

import mxnet as mx
import numpy as np

from hora.common.core_types import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hora.common.handles import synchronize
from hora.common.ops import reducescatter_rows  # noqa: F401
from hora.common.process_sets import global_process_set
from hora.mxnet.adapter import collectives as _collectives


def _ndarray(array, like):
    """``array`` (NumPy, from the core) as a new NDArray on ``like``'s context."""
    # By name: MXNet knows int64 as numpy.int64, not as its twin numpy.longlong.
    dtype = np.dtype(array.dtype.name)
    return mx.nd.array(array.view(dtype), ctx=like.context, dtype=dtype)


def _write(tensor, array):
    """Copies ``array`` into ``tensor`` (an NDArray that ``_writable``
    checked) and returns ``tensor``."""
    tensor[:] = array
    return tensor


def _listed(tensors):
    """A grouped op's ``tensors`` as a list (anything else is left for the
    common checks to refuse with their error)."""
    if isinstance(tensors, mx.nd.NDArray) or isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        return tensors
    return list(tensors)


def _writable(tensors):
    """``tensors`` (NDArrays) checked writable before anything is submitted."""
    for i, tensor in enumerate(tensors if isinstance(tensors, list) else []):
        if isinstance(tensor, mx.nd.NDArray) and not tensor.writable:
            raise ValueError(f"tensor {i} is a read-only NDArray; the in-place forms write into it")
    return tensors


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """``tensor`` reduced over the set (default: Average), as a new NDArray."""
    result = _collectives.allreduce(tensor, average=average, name=name, op=op, prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor, process_set=process_set)
    return _ndarray(result, tensor)


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """In-place allreduce; returns ``tensor``, which holds the result."""
    _writable([tensor])
    result = _collectives.allreduce(tensor, average=average, name=name, op=op, prescale_factor=prescale_factor,
                                    postscale_factor=postscale_factor, process_set=process_set)
    return _write(tensor, result)


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, op=None):
    """Each NDArray of the list reduced over the set; a list of new NDArrays."""
    tensors = _listed(tensors)
    results = synchronize(_collectives.grouped_allreduce_async(
        tensors, average=average, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set))
    return [_ndarray(result, tensor) for result, tensor in zip(results, tensors)]


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns the NDArrays, which hold the results."""
    tensors = _writable(_listed(tensors))
    results = synchronize(_collectives.grouped_allreduce_async(
        tensors, average=average, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set))
    return [_write(tensor, result) for result, tensor in zip(results, tensors)]


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Every member's ``tensor`` concatenated along the first dimension (which
    may differ between members), in set-rank order."""
    return _ndarray(_collectives.allgather(tensor, name=name, process_set=process_set), tensor)


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """``allgather`` of each NDArray of the list."""
    tensors = _listed(tensors)
    results = synchronize(_collectives.grouped_allgather_async(tensors, name=name, process_set=process_set))
    return [_ndarray(result, tensor) for result, tensor in zip(results, tensors)]


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """The value of ``tensor`` on ``root_rank`` (a global rank, a member of the set)."""
    return _ndarray(_collectives.broadcast(tensor, root_rank, name=name, process_set=process_set), tensor)


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``, which holds the root's value."""
    _writable([tensor])
    return _write(tensor, _collectives.broadcast(tensor, root_rank, name=name, process_set=process_set))


# type of a hora error -> that type made an mx.base.MXNetError too.
_mxnet_error_types = {}


def _as_mxnet_error(error):
    """``error`` as an instance of a class that derives from its own and
    from ``mx.base.MXNetError`` (what horovod.mxnet's ops raise), so that
    code written for either catches it."""
    kind = type(error)
    if kind not in _mxnet_error_types:
        _mxnet_error_types[kind] = type(kind.__name__, (kind, mx.base.MXNetError),
                                        {"__module__": kind.__module__, "__doc__": kind.__doc__})
    converted = Exception.__new__(_mxnet_error_types[kind])
    converted.args = error.args
    converted.__dict__.update(getattr(error, "__dict__", {}))
    return converted


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to member i of the set (an even
    split when None). Returns the rows received, in set-rank order; with
    ``splits`` given, ``(output, received_splits)`` as Horovod does, the
    received splits an int32 NDArray on the CPU. Bad arguments (splits that
    do not fit the tensor or the set, or are not integers; rows that do not
    divide evenly) raise an error that is both a ``ValueError`` and the
    ``mx.base.MXNetError`` horovod.mxnet raises."""
    try:
        output, received = _collectives.alltoall(tensor, splits, name=name, process_set=process_set)
    except ValueError as error:
        if isinstance(error, mx.base.MXNetError):
            raise
        raise _as_mxnet_error(error) from None
    output = _ndarray(output, tensor)
    if splits is None:
        return output
    return output, mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This member's block of ``tensor`` reduced over the set (Sum or
    Average): member i gets block i of the first dimension, the lowest set
    ranks one extra row when the rows do not divide evenly."""
    result = _collectives.reducescatter(tensor, name=name, op=op, process_set=process_set,
                                        prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return _ndarray(result, tensor)


def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """``reducescatter`` of each NDArray of the list."""
    tensors = _listed(tensors)
    results = synchronize(_collectives.grouped_reducescatter_async(
        tensors, name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor))
    return [_ndarray(result, tensor) for result, tensor in zip(results, tensors)]
