"""The values front ends pass to the core: Horovod's reduction constants, the
core's OpType / ReduceOp / DataType, and the element types hora moves.

Every front end names element types by the framework-neutral names below
("float32", "bfloat16", ...); its adapter says which name a tensor has.
"""

import warnings

from hora import _core

# Horovod's values for the reduction constants (hvd.Average == 0, ...).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_REDUCE_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

ALLREDUCE = _core.OpType.ALLREDUCE
ALLGATHER = _core.OpType.ALLGATHER
BROADCAST = _core.OpType.BROADCAST
ALLTOALL = _core.OpType.ALLTOALL
REDUCESCATTER = _core.OpType.REDUCESCATTER
BARRIER = _core.OpType.BARRIER
JOIN = _core.OpType.JOIN

# Horovod's constant -> the core's ReduceOp.
_REDUCE_OPS = {Sum: _core.ReduceOp.SUM, Average: _core.ReduceOp.AVERAGE, Min: _core.ReduceOp.MIN,
               Max: _core.ReduceOp.MAX, Product: _core.ReduceOp.PRODUCT, Adasum: _core.ReduceOp.ADASUM}

# Element type name ("uint8", ..., "bool") -> the core's DataType.
DATA_TYPES = {name.lower(): value for name, value in _core.DataType.__members__.items()}
SUPPORTED_DTYPES = ", ".join(DATA_TYPES)

# The core hands its own outputs back as NumPy arrays, which have no
# bfloat16: those bytes travel as float16 (same width) and the adapter
# reinterprets them, without a copy.
_OUTPUT_CARRIERS = {"bfloat16": "float16"}


def output_dtype(dtype_name):
    """The DataType under which ``_core.output`` returns an output of element
    type ``dtype_name``."""
    return DATA_TYPES[_OUTPUT_CARRIERS.get(dtype_name, dtype_name)]


def check_dtype(dtype_name, what="tensor"):
    """ValueError unless hora moves elements of type ``dtype_name``."""
    if dtype_name not in DATA_TYPES:
        raise ValueError(f"{what} has an unsupported dtype {dtype_name}; supported: {SUPPORTED_DTYPES}")


def core_reduce_op(op):
    """The core's ReduceOp for Horovod's constant ``op`` (already resolved)."""
    return _REDUCE_OPS[op]


def reduce_op_name(op):
    return _REDUCE_OP_NAMES[op]


def resolve_reduce_op(op, average, default=Average):
    """Horovod's rules: ``average`` is the deprecated spelling of ``op``."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average; please provide only one of them")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed", DeprecationWarning)
        op = Average if average else Sum
    if op is None:
        op = default
    try:
        known = op in _REDUCE_OP_NAMES
    except TypeError:  # unhashable
        known = False
    if not known:
        raise ValueError(f"unknown reduction op {op!r}; use hvd.Sum, hvd.Average, hvd.Adasum, hvd.Min, hvd.Max "
                         "or hvd.Product")
    return op
