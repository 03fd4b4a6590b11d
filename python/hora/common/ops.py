"""Op submission shared by the front ends: reduction constants, handles,
poll and synchronize."""

import numbers
import operator
import warnings

import numpy as np

from hora import _core
from hora.common import process_sets as _process_sets

# Horovod's values for the reduction constants.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_CORE_REDUCE = {Sum: 0, Average: 1, Min: 2, Max: 3, Product: 4}
_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER = range(6)

# Core DataType codes of the NumPy dtypes hora moves.
_DTYPE_CODES = {
    np.dtype(np.uint8): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float16): 4,
    np.dtype(np.float32): 6,
    np.dtype(np.float64): 7,
    np.dtype(np.bool_): 8,
}


def dtype_code(dtype):
    try:
        return _DTYPE_CODES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"unsupported dtype {dtype}; supported: uint8, int8, int32, int64, "
                         "float16, bfloat16, float32, float64, bool") from None


def resolve_reduce_op(op, average, default=Average):
    """Horovod's rules: ``average`` is the deprecated spelling of ``op``."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average; please provide only one of them")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed", DeprecationWarning)
        op = Average if average else Sum
    if op is None:
        op = default
    if op not in _NAMES:
        raise ValueError(f"unknown reduction op {op!r}; use hvd.Sum, hvd.Average, hvd.Min, hvd.Max or hvd.Product")
    if op == Adasum:
        raise ValueError("the Adasum reduction is not supported by hora yet; use Sum or Average")
    return op


class Handle:
    """An op in flight. ``poll`` tells whether it is done; ``synchronize``
    waits and returns its result (raising its error)."""

    __slots__ = ("_work", "_keep", "_finish", "_done", "_result")

    def __init__(self, work, keep, finish):
        self._work = work
        self._keep = keep
        self._finish = finish
        self._done = False
        self._result = None

    def wait(self):
        if not self._done:
            self._work.wait()
            self._result = self._finish(self._work)
            self._done = True
            self._keep = None
        return self._result


class GroupHandle:
    """Several ops submitted together; their results come back as a list."""

    __slots__ = ("_handles",)

    def __init__(self, handles):
        self._handles = handles

    def ready(self):
        return all(h._work.ready() for h in self._handles)

    def wait(self):
        return [h.wait() for h in self._handles]


def _integer(value, what):
    """``value`` as an int; ValueError for anything that is not an integer
    (a float, a string, a bool counts as one only when it is an int)."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


def _number(value, what):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise ValueError(f"{what} must be a real number, got {value!r}")
    return float(value)


def tensor_list(tensors, what, tensor_type, noun):
    """``tensors`` as a non-empty list; ValueError for a single
    ``tensor_type`` (a list is needed), a non-iterable or an empty list."""
    if isinstance(tensors, tensor_type) or not hasattr(tensors, "__iter__"):
        raise ValueError(f"{what} needs a list of {noun}s, got {type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what} needs at least one {noun}")
    return tensors


def split_list(splits):
    """``splits`` (None, or a 1-D sequence or array of integers) as a list."""
    if splits is None:
        return []
    shape = np.shape(splits)
    if len(shape) != 1:
        raise ValueError(f"splits must be a 1-D sequence of integers, got shape {shape}")
    return [_integer(s, "each entry of splits") for s in splits]


def submit(op, array, output, name, process_set, finish, reduce_op=Sum, root=0, prescale=1.0, postscale=1.0,
           splits=()):
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name must be a string or None, got {type(name).__name__}")
    root = _integer(root, "root_rank")
    prescale = _number(prescale, "prescale_factor")
    postscale = _number(postscale, "postscale_factor")
    splits = [_integer(s, "each entry of splits") for s in splits]
    set_id = _process_sets.resolve(process_set)
    work = _core.enqueue(set_id, op, name or "", array, output, _CORE_REDUCE.get(reduce_op, 0), root,
                         prescale, postscale, splits)
    return Handle(work, (array, output), finish)


def poll(handle):
    """True when the op behind ``handle`` has finished (successfully or not)."""
    if isinstance(handle, GroupHandle):
        return handle.ready()
    if not isinstance(handle, Handle):
        raise ValueError(f"poll() needs a handle returned by an *_async function, got {type(handle).__name__}")
    return handle._done or handle._work.ready()


def synchronize(handle):
    """Waits for the op behind ``handle`` and returns its result."""
    if not isinstance(handle, (Handle, GroupHandle)):
        raise ValueError(f"synchronize() needs a handle returned by an *_async function, got {type(handle).__name__}")
    return handle.wait()


def output_of(work, dtype):
    return _core.output(work, dtype_code(dtype)).view(dtype)


def reducescatter_rows(rows, set_size, set_rank):
    base, extra = divmod(rows, set_size)
    return base + (1 if set_rank < extra else 0)
