"""The collectives on TensorFlow tensors, eager and inside ``tf.function``,
with Horovod's gradients.

Each op runs ``hora.tensorflow.adapter.collectives`` (hora.common.ops):
at once when executing eagerly, and as one ``tf.py_function`` node inside a
graph, whose body runs eagerly when the graph runs. ``tf.function`` orders
stateful nodes as the program wrote them, so every member submits its ops
in the same order. In a ``tf.compat.v1`` graph an op is two nodes that hold
no thread while it waits (hora.tensorflow.sessions). XLA cannot compile these nodes
(docs/frameworks.md).

Gradients (``tf.custom_gradient``) are Horovod's, on the op's process set:
allreduce -> the same allreduce of the gradient; allgather -> this member's
rows of the averaged gradient; broadcast -> the averaged gradient on the
root, zero elsewhere; alltoall -> the alltoall of the gradient back to its
senders; reducescatter -> the allgather of the gradient, times the set's
size for Sum and times the scale factors.
"""

import re

import tensorflow as tf

from hora.common import core_types as _types
from hora.common import ops as _ops
from hora.common import submission as _submission
from hora.common.core_types import Average, Sum
from hora.common.ops import reducescatter_rows
from hora.common.process_sets import global_process_set
from hora.tensorflow import errors as _errors
from hora.tensorflow import sessions as _sessions
from hora.tensorflow.adapter import collectives, converted

_adapter = collectives.adapter


def _set(process_set):
    return global_process_set if process_set is None else process_set


def tensor_of(value, what="tensor"):
    """``value`` as a tf.Tensor (variables are read); ValueError for anything
    TensorFlow cannot convert and for element types hora does not move."""
    if isinstance(value, (tf.IndexedSlices, tf.SparseTensor)):
        raise ValueError(f"{what} is a {type(value).__name__}; this op takes dense tensors")
    if not isinstance(value, (tf.Tensor, tf.Variable)):
        value = converted(value, what)
    else:
        value = tf.convert_to_tensor(value)
    _types.check_dtype(_adapter.dtype_name(value), what)
    return value


def tensor_list_of(values, what):
    values = _ops.tensor_list(values, what, (tf.Tensor, tf.Variable, tf.IndexedSlices), "tensor")
    return [tensor_of(v, f"tensor {i}") for i, v in enumerate(values)]


def run(fn, inputs, dtypes):
    """``fn(*inputs)``, a list of tensors of ``dtypes``: at once when
    executing eagerly, else through one ``tf.py_function`` node."""
    if tf.executing_eagerly():
        return list(_errors.run_eagerly(fn, *inputs))
    _refuse_xla()
    if not tf.compat.v1.get_default_graph().building_function:
        return _sessions.asynchronous(fn, inputs, dtypes)
    return tf.py_function(_errors.graph_body(fn), list(inputs), list(dtypes))


def _refuse_xla():
    """ValueError inside an XLA-compiled function: XLA cannot run Python."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise ValueError("hora's TensorFlow ops cannot run inside an XLA-compiled function (tf.function("
                         "jit_compile=True), or Keras compile(jit_compile=True)); compile without XLA")


def _leading_unknown(shape):
    return tf.TensorShape([None]).concatenate(shape[1:]) if shape.rank else tf.TensorShape(None)


def graph_name(name, kind, tensors):
    """The op's name: ``name``, or inside a graph (name None) Horovod's name
    from its tensors' names, the same on every member running the same
    program. Named ops match however the graph orders them (TensorFlow 1
    sessions run independent nodes in any order)."""
    if name is not None or tf.executing_eagerly() or not tensors:
        return name
    key = tensors[0].name if len(tensors) == 1 else f"{tensors[0].name}_{tensors[-1].name}"
    return f"Horovod{kind}_" + re.sub("[^a-zA-Z0-9_]", "_", key)


def _zeros_for_missing(grads, outputs):
    return [tf.zeros_like(y) if g is None else g for g, y in zip(grads, outputs)]


# Allreduce.

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """Horovod's raw allreduce op (default Sum), differentiable."""
    return _grouped_allreduce([tensor], name, op, prescale_factor, postscale_factor, ignore_name_scope,
                              process_set, single=True)[0]


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set, single=False):
    """Allreduces each tensor of the list in one submission; differentiable."""
    op = _types.resolve_reduce_op(op, None)
    tensors = [tensor_of(tensors[0])] if single else tensor_list_of(tensors, "grouped_allreduce")
    ps = _set(process_set)

    @tf.custom_gradient
    def reduce(*xs):
        op_name = graph_name(name, "GroupedAllreduce" if len(xs) > 1 else "Allreduce", xs)

        def reduce_now(*xs):
            if len(xs) == 1:
                return [collectives.allreduce(xs[0], None, op_name, None, op, prescale_factor, postscale_factor, ps)]
            return collectives.grouped_allreduce(list(xs), None, op_name, None, op, prescale_factor, postscale_factor,
                                                 ps)

        ys = run(reduce_now, xs, [x.dtype for x in xs])
        for x, y in zip(xs, ys):
            y.set_shape(x.shape)

        def grad(*dys):
            return _grouped_allreduce(_zeros_for_missing(dys, ys), op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, process_set=ps)

        return ys, grad

    return list(reduce(*tensors))


# Allgather.

def _own_rows(grad_reduced, rows, ps):
    """This member's block of an allgathered gradient."""
    counts = allgather(tf.reshape(tf.cast(rows, tf.int64), [1]), process_set=ps)
    offset = tf.reduce_sum(counts[:ps.rank()])
    return tf.slice(grad_reduced, tf.concat([[offset], tf.zeros([tf.rank(grad_reduced) - 1], tf.int64)], 0),
                    tf.concat([[tf.cast(rows, tf.int64)], tf.fill([tf.rank(grad_reduced) - 1],
                                                                  tf.constant(-1, tf.int64))], 0))


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every member's tensors concatenated along the first dimension (which
    may differ between members), in set-rank order; one list per call."""
    return _grouped_allgather(tensor_list_of(tensors, "grouped_allgather"), name, process_set)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every member's ``tensor`` concatenated along the first dimension,
    in set-rank order. Differentiable."""
    return _grouped_allgather([tensor_of(tensor)], name, process_set)[0]


def _grouped_allgather(tensors, name, process_set):
    ps = _set(process_set)

    @tf.custom_gradient
    def gather(*xs):
        op_name = graph_name(name, "GroupedAllgather" if len(xs) > 1 else "Allgather", xs)

        def gather_now(*xs):
            if len(xs) == 1:
                return [collectives.allgather(xs[0], op_name, ps)]
            return collectives.grouped_allgather(list(xs), op_name, ps)

        ys = run(gather_now, xs, [x.dtype for x in xs])
        for x, y in zip(xs, ys):
            y.set_shape(_leading_unknown(x.shape))

        def grad(*dys):
            dys = _zeros_for_missing(dys, ys)
            reduced = [_allreduce(dy, op=Average, process_set=ps) for dy in dys]
            return [_own_rows(r, tf.shape(x)[0] if x.shape.rank != 0 else 1, ps) for r, x in zip(reduced, xs)]

        return ys, grad

    return list(gather(*tensors))


# Broadcast.

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """The value of ``tensor`` on ``root_rank`` (a global rank, a member of
    the set). Differentiable."""
    tensor = tensor_of(tensor)
    root_rank = _submission.integer(root_rank, "root_rank")
    ps = _set(process_set)

    @tf.custom_gradient
    def cast(x):
        op_name = graph_name(name, "Broadcast", [x])
        y = run(lambda t: [collectives.broadcast(t, root_rank, op_name, ps)], [x], [x.dtype])[0]
        y.set_shape(x.shape)

        def grad(dy):
            reduced = _allreduce(dy, op=Average, process_set=ps)
            # Times one or zero, not zeros_like: a session must run the
            # allreduce on every member (zeros_like of a known shape does not
            # need it), and every member makes the same ops, so that the
            # names of later ops in the graph agree.
            keep = 1 if ps.included() and _rank() == root_rank else 0
            return reduced * tf.constant(keep, dtype=reduced.dtype)

        return y, grad

    return cast(tensor)


def _rank():
    from hora.common import basics

    return basics.rank()


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns every variable of the list its value on ``root_rank``;
    returns the new values."""
    variables = _ops.tensor_list(variables, "broadcast_", (tf.Variable,), "variable")
    for i, v in enumerate(variables):
        if isinstance(v, tf.Tensor) or not callable(getattr(v, "assign", None)):
            raise ValueError(f"broadcast_ assigns variables; entry {i} is a {type(v).__name__}")
    values = broadcast_group([tf.convert_to_tensor(v) for v in variables], root_rank, name, process_set)
    return [v.assign(value) for v, value in zip(variables, values)]


def broadcast_group(tensors, root_rank, name=None, process_set=global_process_set):
    """The root's values of several tensors, submitted together (not differentiable)."""
    tensors = tensor_list_of(tensors, "broadcast")
    root_rank = _submission.integer(root_rank, "root_rank")
    ps = _set(process_set)

    group_name = graph_name(name, "BroadcastGroup", tensors)

    def cast_now(*xs):
        names = _ops._names(group_name, len(xs))
        handles = [collectives.broadcast_async(x, root_rank, n, ps) for x, n in zip(xs, names)]
        return [_ops.synchronize(h) for h in handles]

    ys = run(cast_now, tensors, [t.dtype for t in tensors])
    for t, y in zip(tensors, ys):
        y.set_shape(t.shape)
    return ys


# Alltoall.

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to member i of the set (an even
    split when None); returns ``(output, received_splits)`` when ``splits``
    is given, else the output alone. Differentiable in ``tensor``."""
    tensor = tensor_of(tensor)
    ps = _set(process_set)
    inputs = [tensor]
    if splits is not None:
        if isinstance(splits, (tf.Tensor, tf.Variable)):
            splits_tensor = tf.convert_to_tensor(splits)
            if not splits_tensor.dtype.is_integer:
                raise ValueError(f"alltoall: splits must hold integers, got dtype {splits_tensor.dtype.name}")
            if splits_tensor.shape.rank not in (None, 1):
                raise ValueError(f"alltoall: splits must be 1-D, got shape {splits_tensor.shape.as_list()}")
        else:
            splits_tensor = tf.constant(_ops.split_list(splits), dtype=tf.int32)
        inputs.append(splits_tensor)

    @tf.custom_gradient
    def exchange(x):
        op_name = graph_name(name, "Alltoall", [x])

        def exchange_now(x, *given):
            return list(collectives.alltoall(x, given[0] if given else None, op_name, ps))

        split_dtype = inputs[1].dtype if len(inputs) > 1 else tf.int32
        output, received = run(exchange_now, [x] + inputs[1:], [x.dtype, split_dtype])
        output.set_shape(_leading_unknown(x.shape))
        received.set_shape([ps.size()] if ps.size() else None)

        def grad(d_output, d_received=None):
            if d_output is None:
                d_output = tf.zeros_like(output)
            return alltoall(d_output, splits=received, process_set=ps)[0]

        return (output, received), grad

    output, received = exchange(tensor)
    return (output, received) if splits is not None else output


# Reducescatter.

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's raw reducescatter op, differentiable."""
    return _grouped_reducescatter([tensor], name, op, ignore_name_scope, process_set, prescale_factor,
                                  postscale_factor, single=True)[0]


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0, single=False):
    op = _types.resolve_reduce_op(op, None)
    tensors = [tensor_of(tensors[0])] if single else tensor_list_of(tensors, "grouped_reducescatter")
    ps = _set(process_set)
    scale = (ps.size() if op == Sum else 1) * prescale_factor * postscale_factor

    @tf.custom_gradient
    def scatter(*xs):
        op_name = graph_name(name, "GroupedReducescatter" if len(xs) > 1 else "Reducescatter", xs)

        def scatter_now(*xs):
            if len(xs) == 1:
                return [collectives.reducescatter(xs[0], op_name, None, op, ps, prescale_factor, postscale_factor)]
            return collectives.grouped_reducescatter(list(xs), op_name, None, op, ps, prescale_factor,
                                                     postscale_factor)

        ys = run(scatter_now, xs, [x.dtype for x in xs])
        for x, y in zip(xs, ys):
            rows = x.shape[0] if x.shape.rank and x.shape[0] is not None and ps.included() else None
            shape = _leading_unknown(x.shape)
            if rows is not None:
                shape = tf.TensorShape([reducescatter_rows(rows, ps.size(), ps.rank())]).concatenate(x.shape[1:])
            y.set_shape(shape)

        def grad(*dys):
            dys = _zeros_for_missing(dys, ys)
            return [allgather(dy * scale if scale != 1 else dy, process_set=ps) for dy in dys]

        return ys, grad

    return list(scatter(*tensors))


# Ops without tensors.

def join(process_set=global_process_set):
    """Tells the set that this member has finished its data and waits until
    every member has; returns the global rank that joined last (a tensor)."""
    return run(lambda: [tf.constant(_ops.join(process_set=process_set), dtype=tf.int32)], [], [tf.int32])[0]


def barrier(process_set=global_process_set):
    """Returns once every member of the set has called it."""
    if tf.executing_eagerly():
        _errors.run_eagerly(_ops.barrier, process_set)
        return None
    return run(lambda: [tf.constant(_ops.barrier(process_set) or 0, dtype=tf.int32)], [], [tf.int32])[0]


def size_op(process_set_id=0, name=None):
    """The number of ranks of the set with that id, as a tensor."""
    from hora.common import process_sets

    return tf.constant(process_sets.process_set_by_id(process_set_id).size(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank is a member of the set with that id, else 0."""
    from hora.common import process_sets

    ps = process_sets.process_set_by_id(process_set_id)
    return tf.constant(1 if ps is global_process_set or ps.included() else 0, dtype=tf.int32, name=name)


def rank_op(name=None):
    from hora.common import basics

    return tf.constant(basics.rank(), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    from hora.common import basics

    return tf.constant(basics.local_rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    from hora.common import basics

    return tf.constant(basics.local_size(), dtype=tf.int32, name=name)
