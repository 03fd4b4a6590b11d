"""The collectives, written once for every framework.

``Collectives(adapter)`` has the names, signatures and defaults of
``horovod.torch`` 0.28 (plain, ``*_async``, in-place ``*_`` and ``grouped_*``
forms); a front end exposes its methods as its public functions and adds
what its framework needs (hora.torch: autograd). ``barrier`` and ``join``
take no tensor and are plain functions.

Every op takes ``process_set=`` (default: the global set); roots are global
ranks. Inputs are never modified except by the ``*_`` forms. The ``*_async``
forms only submit the op and return a handle; nothing waits for other
members before ``synchronize``.
"""

from hora import _core
from hora.common import core_types as _types
from hora.common import process_sets as _process_sets
from hora.common.core_types import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hora.common.handles import GroupHandle, Handle, poll, synchronize  # noqa: F401
from hora.common.process_sets import global_process_set
from hora.common.submission import checked_arguments, enqueue, integer, run
from hora.errors import UnsupportedOperationError


def _names(name, count):
    """The names of a grouped op's parts: ``name.0``, ``name.1``, ..."""
    return [f"{name}.{i}" if name else None for i in range(count)]


def _set(process_set):
    return global_process_set if process_set is None else process_set


def tensor_list(tensors, what, tensor_types, noun):
    """``tensors`` as a non-empty list; ValueError for a single tensor (a list
    is needed), a non-iterable or an empty list."""
    if isinstance(tensors, tensor_types) or not hasattr(tensors, "__iter__"):
        raise ValueError(f"{what} needs a list of {noun}s, got {type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what} needs at least one {noun}")
    return tensors


def split_list(splits):
    """``splits`` (None, or a 1-D sequence of integers) as a list."""
    if splits is None:
        return []
    if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
        raise ValueError(f"splits must be a 1-D sequence of integers, got {type(splits).__name__}")
    values = list(splits)
    if any(hasattr(s, "__len__") for s in values):
        raise ValueError("splits must be a 1-D sequence of integers, got a nested sequence")
    return [integer(s, "each entry of splits") for s in values]


def _compressed(compression, tensors, run):
    """``run(tensors)`` (a list of results) with ``compression`` (Horovod's
    compress / decompress protocol; None: none) applied around it."""
    if compression is None:
        return run(tensors)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    return [compression.decompress(t, ctx) for t, ctx in zip(run(list(compressed)), ctxs)]


def reducescatter_rows(rows, set_size, set_rank):
    """Rows of member ``set_rank``'s block: the lowest set ranks get one
    extra row when the rows do not divide evenly."""
    base, extra = divmod(rows, set_size)
    return base + (1 if set_rank < extra else 0)


def submit(op, source, output, name, process_set, finish, reduce_op=Sum, root=0, prescale=1.0, postscale=1.0,
           splits=(), caller_waits=False):
    """Hands one op on ``process_set`` to the core and returns its handle
    (hora.common.submission.enqueue says what the arguments are)."""
    name, root, prescale, postscale = checked_arguments(name, root, prescale, postscale)
    set_id = _process_sets.resolve(process_set)
    return enqueue(op, source, output, name, set_id, finish, reduce_op, root, prescale, postscale, splits,
                   caller_waits)


def barrier(process_set=global_process_set):
    """Returns once every member of the set has called it."""
    _process_sets.barrier(process_set)


def join(device=-1, process_set=global_process_set):
    """Tells the set that this member has finished its data, and waits until
    every member has.

    Meanwhile this member takes part in the ops the others still run, as
    Horovod defines it (an allreduce gets zeros from it, so Average still
    divides by the set's size). Returns the global rank of the member that
    joined last, the same on every member. ``device`` is accepted for
    Horovod compatibility (hora moves CPU tensors)."""
    handle = submit(_types.JOIN, bytearray(), None, None, process_set,
                    lambda work: int(_core.output(work, _types.DATA_TYPES["int32"])[0]))
    return synchronize(handle)


class Collectives:
    """horovod.torch's collectives on the tensors of one framework, through
    its ``Adapter``. Stateless; any thread. The ``*_async`` forms never
    block; the others wait for their result."""

    def __init__(self, adapter):
        self.adapter = adapter

    # Checks and buffers.

    def check(self, tensor, what="tensor", in_place=False):
        """``tensor`` as the adapter takes it; ValueError unless hora can move
        it (and, for the in-place forms, write it: a tensor of the framework,
        not something the adapter had to convert)."""
        checked = self.adapter.check(tensor, what)
        if in_place and checked is not tensor:
            raise ValueError(f"the in-place forms write into {what}, which must be a {self.adapter.name} tensor, "
                             f"got {type(tensor).__name__}")
        _types.check_dtype(self.adapter.dtype_name(checked), what)
        return checked

    def check_list(self, tensors, what, in_place=False):
        """``tensors`` as a non-empty list of tensors hora can move."""
        tensors = tensor_list(tensors, what, self.adapter.tensor_types, "tensor")
        return [self.check(t, f"tensor {i}", in_place) for i, t in enumerate(tensors)]

    def _targets(self, tensor, in_place):
        """``(source, output, finish)``: what the core reads and writes, and
        the op's finish callback."""
        if in_place:
            buffer, result = self.adapter.in_place_target(tensor, "tensor")
            return buffer, buffer, lambda work: result()
        output = self.adapter.empty(self.adapter.shape(tensor), tensor)
        return self.adapter.buffer(tensor), self.adapter.buffer(output), lambda work: output

    def _core_allocated(self, tensor):
        """The finish callback of an op whose output the core allocates."""
        dtype_name = self.adapter.dtype_name(tensor)
        core_dtype = _types.output_dtype(dtype_name)
        return lambda work: self.adapter.from_core(_core.output(work, core_dtype), dtype_name)

    # Allreduce.

    def _allreduces(self, tensors, names, op, prescale_factor, postscale_factor, process_set, in_place,
                    caller_waits=False):
        handles = []
        for tensor, name in zip(tensors, names):
            source, output, finish = self._targets(tensor, in_place)
            handles.append(submit(_types.ALLREDUCE, source, output, name, process_set, finish, reduce_op=op,
                                  prescale=prescale_factor, postscale=postscale_factor, caller_waits=caller_waits))
        return handles

    def _allreduce(self, tensor, average, name, op, prescale_factor, postscale_factor, process_set, in_place,
                   caller_waits):
        op = _types.resolve_reduce_op(op, average)
        tensor = self.check(tensor, in_place=in_place)
        return self._allreduces([tensor], [name], op, prescale_factor, postscale_factor, process_set, in_place,
                                caller_waits)[0]

    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
        """Starts reducing ``tensor`` over the set (default: Average); returns a
        handle. The input is not modified."""
        return self._allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set, False,
                               False)

    def allreduce(self, tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
        """Reduces ``tensor`` over the set (default: Average) and returns the result."""
        def run(tensors):
            return [synchronize(self._allreduce(tensors[0], average, name, op, prescale_factor, postscale_factor,
                                                process_set, False, True))]

        return _compressed(compression, [tensor], run)[0]

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                         process_set=global_process_set):
        """Like ``allreduce_async`` but ``tensor`` receives the result."""
        return self._allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True,
                               False)

    def allreduce_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                   process_set=global_process_set):
        """In-place allreduce; returns ``tensor``, which holds the result."""
        # What _allreduce and synchronize do, without a handle: a repeated
        # small op's cost is mostly this function's own.
        op = _types.resolve_reduce_op(op, average)
        buffer, result = self.adapter.in_place_target(self.check(tensor, in_place=True), "tensor")
        name, _, prescale, postscale = checked_arguments(name, 0, prescale_factor, postscale_factor)
        run(_types.ALLREDUCE, buffer, buffer, name, _process_sets.resolve(process_set), op, 0, prescale, postscale)
        return result()

    def grouped_allreduce_async(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
        """Starts one allreduce per tensor; ``synchronize`` returns the list of results."""
        op = _types.resolve_reduce_op(op, average)
        tensors = self.check_list(tensors, "grouped_allreduce")
        return GroupHandle(self._allreduces(tensors, _names(name, len(tensors)), op, prescale_factor,
                                            postscale_factor, process_set, False))

    def grouped_allreduce(self, tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
        """Allreduces each tensor of the list; returns the list of results."""
        def run(tensors):
            return synchronize(self.grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                                            postscale_factor, process_set))

        return _compressed(compression, self.check_list(tensors, "grouped_allreduce"), run)

    def grouped_allreduce_async_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                                 postscale_factor=1.0, process_set=global_process_set):
        """In-place ``grouped_allreduce_async``."""
        op = _types.resolve_reduce_op(op, average)
        tensors = self.check_list(tensors, "grouped_allreduce", in_place=True)
        return GroupHandle(self._allreduces(tensors, _names(name, len(tensors)), op, prescale_factor,
                                            postscale_factor, process_set, True))

    def grouped_allreduce_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=global_process_set):
        """In-place grouped allreduce; returns the tensors, which hold the results."""
        return synchronize(self.grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                         postscale_factor, process_set))

    # Allgather.

    def _allgathers(self, tensors, names, process_set):
        return [submit(_types.ALLGATHER, self.adapter.buffer(t), None, n, process_set, self._core_allocated(t))
                for t, n in zip(tensors, names)]

    def allgather_async(self, tensor, name=None, process_set=global_process_set):
        """Starts concatenating every member's ``tensor`` along the first
        dimension (which may differ between members); returns a handle."""
        return self._allgathers([self.check(tensor)], [name], process_set)[0]

    def allgather(self, tensor, name=None, process_set=global_process_set):
        """Every member's ``tensor`` concatenated along the first dimension,
        in set-rank order."""
        return synchronize(self.allgather_async(tensor, name, process_set))

    def grouped_allgather_async(self, tensors, name=None, process_set=global_process_set):
        """``allgather_async`` of each tensor; ``synchronize`` returns a list."""
        tensors = self.check_list(tensors, "grouped_allgather")
        return GroupHandle(self._allgathers(tensors, _names(name, len(tensors)), process_set))

    def grouped_allgather(self, tensors, name=None, process_set=global_process_set):
        return synchronize(self.grouped_allgather_async(tensors, name, process_set))

    # Broadcast.

    def _broadcast(self, tensor, root_rank, name, process_set, in_place, caller_waits=False):
        source, output, finish = self._targets(self.check(tensor, in_place=in_place), in_place)
        return submit(_types.BROADCAST, source, output, name, process_set, finish, root=root_rank,
                      caller_waits=caller_waits)

    def broadcast_async(self, tensor, root_rank, name=None, process_set=global_process_set):
        """Starts broadcasting ``tensor`` from ``root_rank`` (a global rank, a
        member of the set); returns a handle. The input is not modified."""
        return self._broadcast(tensor, root_rank, name, process_set, False)

    def broadcast(self, tensor, root_rank, name=None, process_set=global_process_set):
        """The value of ``tensor`` on ``root_rank``."""
        return synchronize(self._broadcast(tensor, root_rank, name, process_set, False, True))

    def broadcast_async_(self, tensor, root_rank, name=None, process_set=global_process_set):
        """Like ``broadcast_async`` but ``tensor`` receives the root's value."""
        return self._broadcast(tensor, root_rank, name, process_set, True)

    def broadcast_(self, tensor, root_rank, name=None, process_set=global_process_set):
        """In-place broadcast; returns ``tensor``, which holds the root's value."""
        return synchronize(self._broadcast(tensor, root_rank, name, process_set, True, True))

    # Alltoall.

    def alltoall_async(self, tensor, splits=None, name=None, process_set=global_process_set):
        """Starts sending ``splits[i]`` rows of ``tensor`` to member i of the
        set (an even split when None); ``synchronize`` returns
        ``(output, received_splits)``."""
        tensor = self.check(tensor)
        framework_splits = self.adapter.split_values(splits)
        values, kind = framework_splits if framework_splits is not None else (split_list(splits), None)
        output = self._core_allocated(tensor)

        def finish(work):
            return output(work), self.adapter.received_splits(work.received_splits(), kind)

        return submit(_types.ALLTOALL, self.adapter.buffer(tensor), None, name, process_set, finish, splits=values)

    def alltoall(self, tensor, splits=None, name=None, process_set=global_process_set):
        """``(output, received_splits)``: the rows each member sent this one, in
        set-rank order, and how many came from each."""
        return synchronize(self.alltoall_async(tensor, splits, name, process_set))

    # Reducescatter.

    def _reducescatters(self, tensors, names, op, process_set, prescale_factor, postscale_factor):
        op = _types.resolve_reduce_op(op, None)
        if op not in (Sum, Average):
            raise UnsupportedOperationError(f"reducescatter supports only the Sum and Average reductions, got "
                                            f"{_types.reduce_op_name(op)}")
        shapes = [self.adapter.shape(tensor) for tensor in tensors]
        if not all(shapes):  # before anything is submitted: no op of a group is left in flight
            raise ValueError("reducescatter needs a tensor with at least one dimension")
        ps = _set(process_set)
        _process_sets.resolve(ps)
        handles = []
        for tensor, name, shape in zip(tensors, names, shapes):
            rows = reducescatter_rows(shape[0], ps.size(), ps.rank())
            output = self.adapter.empty((rows,) + tuple(shape[1:]), tensor)
            handles.append(submit(_types.REDUCESCATTER, self.adapter.buffer(tensor), self.adapter.buffer(output),
                                  name, ps, lambda work, output=output: output, reduce_op=op,
                                  prescale=prescale_factor, postscale=postscale_factor))
        return handles

    def reducescatter_async(self, tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                            postscale_factor=1.0):
        """Starts reducing ``tensor`` over the set (Sum or Average) and
        scattering its first dimension: member i gets block i, the lowest set
        ranks one extra row when the rows do not divide evenly."""
        tensor = self.check(tensor)
        return self._reducescatters([tensor], [name], op, process_set, prescale_factor, postscale_factor)[0]

    def reducescatter(self, tensor, name=None, compression=None, op=Average, process_set=global_process_set,
                      prescale_factor=1.0, postscale_factor=1.0):
        """This member's block of ``tensor`` reduced over the set."""
        def run(tensors):
            return [synchronize(self.reducescatter_async(tensors[0], name, op, process_set, prescale_factor,
                                                         postscale_factor))]

        return _compressed(compression, [tensor], run)[0]

    def grouped_reducescatter_async(self, tensors, name=None, op=Average, process_set=global_process_set,
                                    prescale_factor=1.0, postscale_factor=1.0):
        """``reducescatter_async`` of each tensor; ``synchronize`` returns a list."""
        tensors = self.check_list(tensors, "grouped_reducescatter")
        return GroupHandle(self._reducescatters(tensors, _names(name, len(tensors)), op, process_set,
                                                prescale_factor, postscale_factor))

    def grouped_reducescatter(self, tensors, name=None, compression=None, op=Average,
                              process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
        """Reducescatters each tensor of the list; returns the list of blocks."""
        def run(tensors):
            return synchronize(self.grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                                                postscale_factor))

        return _compressed(compression, self.check_list(tensors, "grouped_reducescatter"), run)
