"""The collectives on torch tensors without autograd: the asynchronous and
in-place forms, handles, ``poll``/``synchronize``, ``join`` and ``barrier``.

Names, signatures and defaults are those of ``horovod.torch`` 0.28. Every op
takes ``process_set=`` (default: the global set); roots are global ranks.
Inputs are never modified except by the ``*_`` forms. Each op is announced on
its set's join sequence (see ``hora.torch.join``).
"""

import numpy as np
import torch

from hora.common import ops as _ops
from hora.common import process_sets as _process_sets
from hora.common.ops import Average, Sum
from hora.common.process_sets import global_process_set
from hora.torch import join_protocol as _join
from hora.torch import tensors as _tensors


def _resolved(process_set):
    ps = global_process_set if process_set is None else process_set
    _process_sets.resolve(ps)
    return ps


def _names(name, count):
    return [f"{name}.{i}" if name else None for i in range(count)]


def _returning(value):
    return lambda: value


def _finisher(result):
    """The op's finish callback: ``result()`` once the core is done."""
    return lambda work: result()


def _gathered_as(dtype):
    return lambda work: _tensors.core_output(work, dtype)


def _buffers(tensor, in_place):
    """``(source, output, result)``: what the core reads and writes, and a
    function giving what the op returns."""
    if in_place:
        buffer, result = _tensors.in_place_target(tensor)
        return buffer, buffer, result
    source = _tensors.as_input(tensor)
    output = _tensors.new_output(tensor)
    return source, output, _returning(output)


def check_list(tensors, what):
    """``tensors`` as a non-empty list of tensors hora can move; ValueError otherwise."""
    tensors = _ops.tensor_list(tensors, what, torch.Tensor, "tensor")
    for i, t in enumerate(tensors):
        _tensors.check(t, f"tensor {i}")
    return tensors


class DeferredResult:
    """A result computed from other handles once they finish. Calling it
    waits and returns the result, as Horovod's sparse allreduce handle does."""

    def __init__(self, handles, finish):
        self._handles = handles
        self._finish = finish

    def ready(self):
        return all(_ops.poll(h) for h in self._handles)

    def __call__(self):
        return self._finish([_ops.synchronize(h) for h in self._handles])


def poll(handle):
    """True when the op behind ``handle`` has finished; ``synchronize`` then
    returns without blocking."""
    if isinstance(handle, DeferredResult):
        return handle.ready()
    return _ops.poll(handle)


def synchronize(handle):
    """Waits for the op behind ``handle`` and returns its output (raising its
    error as a ``HorovodInternalError`` kind)."""
    if isinstance(handle, DeferredResult):
        return handle()
    return _ops.synchronize(handle)


# Allreduce.

def submit_allreduces(tensors, in_place, names, op, prescale_factor, postscale_factor, process_set,
                      announce=True):
    """Submits one allreduce per tensor; returns ``(handles, descriptions)``.

    With ``announce`` False the caller announces ``descriptions`` itself
    (the optimizer announces a whole step at once)."""
    op = _ops.resolve_reduce_op(op, None)
    ps = _resolved(process_set)
    handles, descriptions = [], []
    for tensor, name in zip(tensors, names):
        source, output, result = _buffers(tensor, in_place)
        handles.append(_ops.submit(_ops.ALLREDUCE, source, output, name, ps, _finisher(result), reduce_op=op,
                                   prescale=prescale_factor, postscale=postscale_factor))
        descriptions.append(_join.allreduce_op(name, source, op, prescale_factor, postscale_factor))
    if announce:
        _join.announce(ps, descriptions)
    return handles, descriptions


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing ``tensor`` over the set (default: Average); returns a handle.
    The input is not modified."""
    op = _ops.resolve_reduce_op(op, average)
    _tensors.check(tensor)
    handles, _ = submit_allreduces([tensor], False, [name], op, prescale_factor, postscale_factor, process_set)
    return handles[0]


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Like ``allreduce_async`` but ``tensor`` receives the result."""
    op = _ops.resolve_reduce_op(op, average)
    _tensors.check(tensor)
    handles, _ = submit_allreduces([tensor], True, [name], op, prescale_factor, postscale_factor, process_set)
    return handles[0]


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns ``tensor``, which holds the result."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts one allreduce per tensor; ``synchronize`` returns the list of results."""
    op = _ops.resolve_reduce_op(op, average)
    tensors = check_list(tensors, "grouped_allreduce")
    handles, _ = submit_allreduces(tensors, False, _names(name, len(tensors)), op, prescale_factor,
                                   postscale_factor, process_set)
    return _ops.GroupHandle(handles)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place ``grouped_allreduce_async``."""
    op = _ops.resolve_reduce_op(op, average)
    tensors = check_list(tensors, "grouped_allreduce")
    handles, _ = submit_allreduces(tensors, True, _names(name, len(tensors)), op, prescale_factor,
                                   postscale_factor, process_set)
    return _ops.GroupHandle(handles)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors, which hold the results."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by allgathering its indices and values
    (duplicates add up when the result is coalesced). Returns a callable
    handle; ``synchronize(handle)`` or ``handle()`` gives the sparse result."""
    op = _ops.resolve_reduce_op(op, None)
    if op not in (Sum, Average):
        raise ValueError("sparse_allreduce_async supports only the Sum and Average reductions")
    t = tensor.coalesce()
    ps = _resolved(process_set)
    indices = t.indices().transpose(0, 1).contiguous()
    values = t.values().contiguous()
    names = [f"{name}.indices", f"{name}.values"] if name else [None, None]
    gathered = _allgathers([indices, values], names, ps)

    def finish(results):
        all_indices, all_values = results
        if op == Average:
            all_values = all_values / ps.size()
        return torch.sparse_coo_tensor(all_indices.transpose(0, 1), all_values, t.size(), check_invariants=True)

    return DeferredResult(gathered, finish)


# Allgather.

def _allgathers(tensors, names, ps):
    announcement = _join.announce(ps, [_join.other_op("allgather", n) for n in names], wait=True)
    announcement.require_all_active("allgather", names[0])
    handles = []
    for tensor, name in zip(tensors, names):
        source = _tensors.as_input(tensor)
        handles.append(_ops.submit(_ops.ALLGATHER, source, None, name, ps,
                                   _gathered_as(source.dtype)))
    return handles


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every member's ``tensor`` along the first
    dimension (which may differ between members); returns a handle."""
    _tensors.check(tensor)
    return _allgathers([tensor], [name], _resolved(process_set))[0]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """``allgather_async`` of each tensor; ``synchronize`` returns a list."""
    tensors = check_list(tensors, "grouped_allgather")
    return _ops.GroupHandle(_allgathers(tensors, _names(name, len(tensors)), _resolved(process_set)))


# Broadcast.

def submit_broadcasts(tensors, root_rank, names, in_place, process_set):
    """One broadcast per tensor after a single announcement; returns handles."""
    ps = _resolved(process_set)
    announcement = _join.announce(ps, [_join.other_op("broadcast", n) for n in names], wait=True)
    announcement.require_all_active("broadcast", names[0])
    handles = []
    for tensor, name in zip(tensors, names):
        source, output, result = _buffers(tensor, in_place)
        handles.append(_ops.submit(_ops.BROADCAST, source, output, name, ps, _finisher(result), root=root_rank))
    return handles


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from ``root_rank`` (a global rank, a
    member of the set); returns a handle. The input is not modified."""
    _tensors.check(tensor)
    return submit_broadcasts([tensor], root_rank, [name], False, process_set)[0]


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Like ``broadcast_async`` but ``tensor`` receives the root's value."""
    _tensors.check(tensor)
    return submit_broadcasts([tensor], root_rank, [name], True, process_set)[0]


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``, which holds the root's value."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# Alltoall.

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending ``splits[i]`` rows of ``tensor`` to member i of the set
    (an even split when None); ``synchronize`` returns
    ``(output, received_splits)``, the splits sized by the set."""
    _tensors.check(tensor)
    ps = _resolved(process_set)
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError(f"alltoall: splits must hold integers, got dtype {splits.dtype}")
        if splits.dim() != 1:
            raise ValueError(f"alltoall: splits must be 1-D, got shape {list(splits.shape)}")
        split_list, splits_dtype = [int(s) for s in splits.tolist()], splits.dtype
    else:
        split_list, splits_dtype = _ops.split_list(splits), torch.int32
    announcement = _join.announce(ps, [_join.other_op("alltoall", name)], wait=True)
    announcement.require_all_active("alltoall", name)
    source = _tensors.as_input(tensor)

    def finish(work):
        received = torch.tensor(work.received_splits(), dtype=splits_dtype)
        return _tensors.core_output(work, source.dtype), received

    return _ops.submit(_ops.ALLTOALL, source, None, name, ps, finish, splits=split_list)


# Reducescatter.

def _reducescatters(tensors, names, op, ps, prescale_factor, postscale_factor):
    op = _ops.resolve_reduce_op(op, None, default=Average)
    if op not in (Sum, Average):
        raise ValueError("reducescatter supports only the Sum and Average reductions")
    for tensor in tensors:
        if tensor.dim() == 0:
            raise ValueError("reducescatter needs a tensor with at least one dimension")
    announcement = _join.announce(ps, [_join.other_op("reducescatter", n) for n in names], wait=True)
    announcement.require_all_active("reducescatter", names[0])
    handles = []
    for tensor, name in zip(tensors, names):
        source = _tensors.as_input(tensor)
        rows = _ops.reducescatter_rows(source.shape[0], ps.size(), ps.rank())
        output = torch.empty((rows,) + tuple(source.shape[1:]), dtype=source.dtype)
        handles.append(_ops.submit(_ops.REDUCESCATTER, source, output, name, ps,
                                   _finisher(_returning(output)), reduce_op=op,
                                   prescale=prescale_factor, postscale=postscale_factor))
    return handles


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set and scattering its first
    dimension: member i gets block i (the lowest set ranks get one extra row
    when the rows do not divide evenly). Returns a handle."""
    _tensors.check(tensor)
    return _reducescatters([tensor], [name], op, _resolved(process_set), prescale_factor, postscale_factor)[0]


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """``reducescatter_async`` of each tensor; ``synchronize`` returns a list."""
    tensors = check_list(tensors, "grouped_reducescatter")
    return _ops.GroupHandle(_reducescatters(tensors, _names(name, len(tensors)), op, _resolved(process_set),
                                            prescale_factor, postscale_factor))


# Barrier and join.

def barrier(process_set=global_process_set):
    """Returns once every member of the set has called it."""
    ps = _resolved(process_set)
    _join.announce(ps, [_join.other_op("barrier", None)], wait=True).require_all_active("barrier", None)
    empty = np.empty(0, dtype=np.uint8)
    _ops.synchronize(_ops.submit(_ops.BARRIER, empty, None, None, ps, lambda work: None))


def join(device=-1, process_set=global_process_set):
    """Tells the set that this rank has finished its data.

    Until every member has joined, this rank takes part with zeros in the
    allreduces the other members still run (so ``Average`` still divides by
    the set's size); other ops fail on the members still active. Blocks until
    every member has joined and returns the global rank of the member that
    joined last, the same on every member. ``device`` is accepted for
    Horovod compatibility (hora moves CPU tensors)."""
    return _join.join(_resolved(process_set))
