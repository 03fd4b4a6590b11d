"""The collectives on NumPy arrays. Inputs are never modified; each op
returns new arrays."""

import numpy as np

from hora.common import ops as _ops
from hora.common.process_sets import global_process_set


def _array(tensor):
    array = np.asarray(tensor)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    _ops.dtype_code(array.dtype)
    return array


def _array_list(tensors, what):
    return _ops.tensor_list(tensors, what, np.ndarray, "array")


def _names(name, count):
    return [f"{name}.{i}" if name else None for i in range(count)]


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    op = _ops.resolve_reduce_op(op, average)
    array = _array(tensor)
    output = np.empty_like(array)
    return _ops.submit(_ops.ALLREDUCE, array, output, name, process_set, lambda work: output, reduce_op=op,
                       prescale=prescale_factor, postscale=postscale_factor)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` over the process set (default: Average)."""
    return _ops.synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                            process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    if not isinstance(tensor, np.ndarray) or not tensor.flags.c_contiguous or not tensor.flags.writeable:
        raise ValueError("allreduce_ needs a writeable, C-contiguous numpy array")
    op = _ops.resolve_reduce_op(op, average)
    _ops.dtype_code(tensor.dtype)
    return _ops.submit(_ops.ALLREDUCE, tensor, tensor, name, process_set, lambda work: tensor, reduce_op=op,
                       prescale=prescale_factor, postscale=postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce: ``tensor`` receives the result and is returned."""
    return _ops.synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                             process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _ops.resolve_reduce_op(op, average)
    tensors = _array_list(tensors, "grouped_allreduce")
    return _ops.GroupHandle([
        allreduce_async(t, None, n, op, prescale_factor, postscale_factor, process_set)
        for t, n in zip(tensors, _names(name, len(tensors)))])


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    return _ops.synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                                    postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    array = _array(tensor)
    return _ops.submit(_ops.ALLGATHER, array, None, name, process_set,
                       lambda work: _ops.output_of(work, array.dtype))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every member's ``tensor`` along the first dimension,
    which may differ between members."""
    return _ops.synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    tensors = _array_list(tensors, "grouped_allgather")
    return _ops.GroupHandle([allgather_async(t, n, process_set) for t, n in zip(tensors, _names(name, len(tensors)))])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return _ops.synchronize(grouped_allgather_async(tensors, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    array = _array(tensor)
    output = np.empty_like(array)
    return _ops.submit(_ops.BROADCAST, array, output, name, process_set, lambda work: output, root=root_rank)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """The value of ``tensor`` on ``root_rank`` (a global rank)."""
    return _ops.synchronize(broadcast_async(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    array = _array(tensor)
    split_list = _ops.split_list(splits)

    def finish(work):
        return _ops.output_of(work, array.dtype), np.asarray(work.received_splits(), dtype=np.int64)

    return _ops.submit(_ops.ALLTOALL, array, None, name, process_set, finish, splits=split_list)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[i]`` rows to member i (even split when None); returns
    ``(output, received_splits)``."""
    return _ops.synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=None, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    op = _ops.resolve_reduce_op(op, None, default=_ops.Average)
    if op not in (_ops.Sum, _ops.Average):
        raise ValueError("reducescatter supports only the Sum and Average reductions")
    array = _array(tensor)
    if array.ndim == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    ps = process_set if process_set is not None else global_process_set
    _ops._process_sets.resolve(ps)
    rows = _ops.reducescatter_rows(array.shape[0], ps.size(), ps.rank())
    output = np.empty((rows,) + array.shape[1:], dtype=array.dtype)
    return _ops.submit(_ops.REDUCESCATTER, array, output, name, ps, lambda work: output, reduce_op=op,
                       prescale=prescale_factor, postscale=postscale_factor)


def reducescatter(tensor, name=None, compression=None, op=None, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the set and returns this member's block of rows; the
    lowest set ranks get one extra row when the rows do not divide evenly."""
    return _ops.synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=None, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    tensors = _array_list(tensors, "grouped_reducescatter")
    return _ops.GroupHandle([
        reducescatter_async(t, n, op, process_set, prescale_factor, postscale_factor)
        for t, n in zip(tensors, _names(name, len(tensors)))])


def grouped_reducescatter(tensors, name=None, compression=None, op=None, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    return _ops.synchronize(grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                                        postscale_factor))


def barrier(process_set=global_process_set):
    """Returns once every member of the set has called it."""
    empty = np.empty(0, dtype=np.uint8)
    _ops.synchronize(_ops.submit(_ops.BARRIER, empty, None, None, process_set, lambda work: None))
