"""The differentiable collectives, with Horovod's gradients.

Each public function wraps a ``torch.autograd.Function``; its backward runs
the collective Horovod runs, on the same process set:

- allreduce: the same allreduce (same op and scale factors) of the gradient;
- allgather: the Average of the gradient over the set, then this member's rows;
- broadcast: the Average of the gradient over the set on the root, zero elsewhere;
- alltoall: an alltoall of the gradient with the received splits;
- reducescatter: an allgather of the gradient, times the set's size for Sum
  and times the scale factors.
"""

import torch

from hora.common import basics as _basics
from hora.common import core_types as _types
from hora.common.core_types import Average, Sum
from hora.common.process_sets import global_process_set
from hora.torch import mpi_ops as _mpi_ops
from hora.torch.compression import Compression


def _set(process_set):
    return global_process_set if process_set is None else process_set


def _recorded(tensor):
    """Whether autograd records an op on ``tensor``; when it does not, the
    differentiable functions skip autograd's bookkeeping (same result)."""
    return tensor.requires_grad and torch.is_grad_enabled()


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce whose gradient is the same allreduce of the gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        handle = _mpi_ops.allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
        return _mpi_ops.synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        average, op, prescale_factor, postscale_factor, process_set = ctx.args
        grad = allreduce(grad_output, average=average, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, process_set=process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` over the process set (default op: Average) and
    returns the result; the input is not modified. Differentiable."""
    _mpi_ops.check(tensor)
    compressed, ctx = compression.compress(tensor)
    if _recorded(compressed):
        reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor,
                                         process_set)
    else:
        reduced = _mpi_ops.collectives.allreduce(compressed, average, name, None, op, prescale_factor,
                                                 postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce whose gradient is the grouped allreduce of the gradients."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        handle = _mpi_ops.grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                  postscale_factor, process_set)
        return tuple(_mpi_ops.synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_outputs):
        average, op, prescale_factor, postscale_factor, process_set = ctx.args
        grads = grouped_allreduce(list(grad_outputs), average=average, op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)
        return (None,) * 6 + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces each tensor of the list; returns the list of results. Differentiable."""
    tensors = _mpi_ops.check_list(tensors, "grouped_allreduce")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                            *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


def _own_rows(grad_reduced, rows, process_set):
    """This member's block of an allgathered gradient."""
    ps = _set(process_set)
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=ps)
    offset = int(counts[:ps.rank()].sum())
    return grad_reduced.narrow(0, offset, rows)


class HorovodAllgather(torch.autograd.Function):
    """Allgather whose gradient is this member's rows of the averaged gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return _mpi_ops.synchronize(_mpi_ops.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return _own_rows(grad_reduced, ctx.rows, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every member's ``tensor`` along the first dimension (which
    may differ between members), in set-rank order. Differentiable."""
    _mpi_ops.check(tensor)
    if not _recorded(tensor):
        return _mpi_ops.synchronize(_mpi_ops.allgather_async(tensor, name, process_set))
    return HorovodAllgather.apply(tensor, name, process_set)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Grouped allgather with the allgather gradient for each tensor."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(_mpi_ops.synchronize(_mpi_ops.grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        reduced = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.process_set)
        ps = _set(ctx.process_set)
        counts = grouped_allgather([torch.tensor([r], dtype=torch.int64) for r in ctx.rows], process_set=ps)
        grads = [g.narrow(0, int(c[:ps.rank()].sum()), rows) for g, c, rows in zip(reduced, counts, ctx.rows)]
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers each tensor of the list; returns the list of results. Differentiable."""
    tensors = _mpi_ops.check_list(tensors, "grouped_allgather")
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast whose gradient is the averaged gradient on the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _mpi_ops.synchronize(_mpi_ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if _basics.rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """The value of ``tensor`` on ``root_rank`` (a global rank, a member of
    the set); the input is not modified. Differentiable."""
    _mpi_ops.check(tensor)
    if not _recorded(tensor):
        return _mpi_ops.collectives.broadcast(tensor, root_rank, name, process_set)
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall whose gradient is the alltoall of the gradient back to its senders."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = _mpi_ops.synchronize(_mpi_ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received_splits = received_splits
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received_splits, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to member i of the set (an even
    split when ``splits`` is None) and returns what this member received, in
    set-rank order. As in Horovod, returns ``(output, received_splits)`` when
    ``splits`` is given and ``output`` alone otherwise. Differentiable."""
    _mpi_ops.check(tensor)
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


def _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor):
    scale = _set(process_set).size() if op == Sum else 1
    return scale * prescale_factor * postscale_factor


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter whose gradient is the allgather of the (scaled) gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(_types.resolve_reduce_op(op, None), process_set, prescale_factor,
                                              postscale_factor)
        handle = _mpi_ops.reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)
        return _mpi_ops.synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output * ctx.scale if ctx.scale != 1 else grad_output
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over the set (Sum or Average) and returns this
    member's block of rows. Differentiable."""
    _mpi_ops.check(tensor)
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Grouped reducescatter with the reducescatter gradient for each tensor."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(_types.resolve_reduce_op(op, None), process_set, prescale_factor,
                                              postscale_factor)
        handle = _mpi_ops.grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                                      postscale_factor)
        return tuple(_mpi_ops.synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = [g * ctx.scale if ctx.scale != 1 else g for g in grad_outputs]
        return (None,) * 5 + tuple(grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters each tensor of the list; returns the list of results. Differentiable."""
    tensors = _mpi_ops.check_list(tensors, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]
