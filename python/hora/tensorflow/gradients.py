"""Averaging gradients over a process set: the reduction that
``DistributedGradientTape`` and the Keras ``DistributedOptimizer`` share,
and the tapes themselves."""

import warnings

import tensorflow as tf

from hora.common import core_types as _types
from hora.common.core_types import Average
from hora.common.submission import integer as _integer
from hora.common.process_sets import global_process_set
from hora.tensorflow import reductions as _reductions
from hora.tensorflow.compression import Compression


# Gradients below this size are packed into one allreduce per dtype.
PACK_LIMIT_BYTES = 1 << 20


def split_evenly(items, parts):
    """``parts`` consecutive slices whose lengths differ by at most one."""
    base, extra = divmod(len(items), parts)
    bounds = [i * base + min(i, extra) for i in range(parts + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(parts)]


def checked_options(op, gradient_predivide_factor, num_groups, groups):
    """``(op, groups)`` after Horovod's checks of DistributedGradientTape's
    and DistributedOptimizer's options (ValueError for bad ones)."""
    op = _types.resolve_reduce_op(op, None)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not isinstance(groups, list):
        if isinstance(groups, bool) or _integer(groups, "groups") <= 0:
            raise ValueError("groups should be a non-negative integer or a list of list of tf.Variable.")
    return op, groups


def variable_key(variable):
    """A hashable key for a variable: TensorFlow's ``ref()``, or the object
    itself for Keras 3 variables, which have none."""
    ref = getattr(variable, "ref", None)
    return ref() if callable(ref) else ("object", id(variable))


class GradientReduction:
    """Reduces a list of gradients over a process set as Horovod does for
    its tape and optimizers. Stateless after construction; callable eagerly
    and inside tf.function. Members outside the set, and sets of one, keep
    their gradients."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, groups=None, process_set=global_process_set):
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.groups = groups
        self.process_set = process_set
        if op == Average:
            self.prescale, self.postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
        else:
            self.prescale = self.postscale = 1.0

    def __call__(self, grads, variables=None):
        grads = list(grads)
        if self.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        ps = self.process_set
        if not ps.included() or ps.size() == 1:
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        reduced = list(grads)
        for part in self._parts(present, grads, variables):
            units = self._packed(part, grads, variables)
            results = _reductions.grouped_allreduce([tensor for _, tensor in units], compression=self.compression,
                                                    op=self.op, prescale_factor=self.prescale,
                                                    postscale_factor=self.postscale, process_set=ps)
            for (indices, _), result in zip(units, results):
                if len(indices) == 1:
                    reduced[indices[0]] = result
                    continue
                pieces = tf.split(result, [grads[i].shape.num_elements() for i in indices])
                for i, piece in zip(indices, pieces):
                    reduced[i] = tf.reshape(piece, grads[i].shape)
        return reduced

    def _packed(self, part, grads, variables):
        """What the grouped allreduce of `part` reduces: (indices, tensor)
        pairs, where the small dense gradients of one dtype are packed into
        one flat tensor (one op instead of one per gradient, as the torch
        front end's buckets do), when the reduction and the compression act
        on each element alone; the others as they are. Only gradients of
        variables are packed: a variable's shape is the same in every trace
        on every member, so all members pack the same gradients (a tensor
        source's static shape may be known in one member's trace and not in
        another's)."""
        elementwise = self.op != _types.Adasum and self.compression in (Compression.none, Compression.fp16)
        units, packs = [], {}
        for i in part:
            g = grads[i]
            of_variable = variables is not None and not isinstance(variables[i], tf.Tensor)
            elements = g.shape.num_elements() if isinstance(g, tf.Tensor) and of_variable else None
            if elementwise and elements is not None and elements * g.dtype.size < PACK_LIMIT_BYTES:
                packs.setdefault(g.dtype, []).append(i)
            else:
                units.append(([i], g))
        for indices in packs.values():
            if len(indices) == 1:
                units.append((indices, grads[indices[0]]))
            else:
                units.append((indices, tf.concat([tf.reshape(grads[i], [-1]) for i in indices], 0)))
        return units

    def _parts(self, present, grads, variables):
        """The indices of the gradients reduced together, part by part."""
        if not present:
            return []
        if isinstance(self.groups, list):
            if variables is None:
                raise ValueError("groups given as lists of variables need the variables of the gradients")
            position = {variable_key(v): i for i, v in enumerate(variables) if grads[i] is not None}
            parts = [[position.pop(variable_key(v)) for v in group if variable_key(v) in position]
                     for group in self.groups]
            return [part for part in parts if part] + [[i] for i in sorted(position.values())]
        if self.groups:
            return [part for part in split_evenly(present, self.groups) if part]
        return [present]

    def scale_local(self, grad):
        """A worker-local gradient divided by the set's size (Horovod's
        ``scale_local_gradients``)."""
        size = float(self.process_set.size())
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
        return grad / size


def reduce_with_locals(reduction, grads, variables, local_refs, scale_local_gradients):
    """``reduction`` of the gradients of every variable not in ``local_refs``;
    local ones stay local (divided by the set's size when
    ``scale_local_gradients``)."""
    grads = list(grads)
    shared = [i for i, v in enumerate(variables) if variable_key(v) not in local_refs]
    reduced = reduction([grads[i] for i in shared], [variables[i] for i in shared])
    result = list(grads)
    for i, g in zip(shared, reduced):
        result[i] = g
    if scale_local_gradients and local_refs:
        for i, v in enumerate(variables):
            if variable_key(v) in local_refs and result[i] is not None:
                result[i] = reduction.scale_local(result[i])
    return result


class _DistributedGradientTape(tf.GradientTape):
    """The methods of the tape ``DistributedGradientTape`` returns (a
    subclass of the given tape's class): ``gradient`` averages the gradients
    over the process set, except those of registered local sources."""

    def register_local_source(self, source):
        """Keeps the gradient of ``source`` (a variable) local to this worker."""
        self._hora_local_sources.add(variable_key(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        grads = super(self._hora_tape_class, self).gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        reduced = reduce_with_locals(self._hora_reduction, flat_grads, flat_sources, self._hora_local_sources,
                                     self._hora_scale_local_gradients)
        return tf.nest.pack_sequence_as(sources, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """``(local, global)`` lists of ``(source, gradient)``."""
        grads = self.gradient(target, sources, output_gradients)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if variable_key(s) in self._hora_local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps ``gradtape`` (recorded or not yet entered) so that ``gradient()``
    returns gradients averaged (or reduced by ``op``) over ``process_set``.
    The result is an instance of a subclass of the tape's class holding its
    recording. ``groups`` (an int, or lists of variables) reduces gradients
    in that many submissions; ``device_*`` are accepted for compatibility."""
    if not isinstance(gradtape, tf.GradientTape):
        raise ValueError(f"DistributedGradientTape wraps a tf.GradientTape, got {type(gradtape).__name__}")
    op, groups = checked_options(op, gradient_predivide_factor, num_groups, groups)
    base = type(gradtape)
    if getattr(gradtape, "_hora_tape_class", None) is not None:
        base = gradtape._hora_tape_class
    namespace = {k: v for k, v in vars(_DistributedGradientTape).items() if k not in ("__dict__", "__weakref__")}
    namespace["_hora_tape_class"] = None
    cls = type(base.__name__, (base,), namespace)
    cls._hora_tape_class = cls
    tape = cls.__new__(cls)
    tape.__dict__.update(vars(gradtape))
    tape._hora_reduction = GradientReduction(compression, sparse_as_dense, op, gradient_predivide_factor, groups,
                                             process_set)
    tape._hora_local_sources = set(getattr(gradtape, "_hora_local_sources", ()))
    tape._hora_scale_local_gradients = scale_local_gradients
    tape.process_set = process_set
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """``DistributedGradientTape`` that keeps the gradients of the variables
    of ``local_layers`` (Keras layers) local."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for var in local_variables_of(local_layers):
        tape.register_local_source(var)
    return tape


def local_variables_of(local_layers):
    """The trainable variables of ``local_layers`` (a layer, a list or None)."""
    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple)) else [local_layers]
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"local_layers must be Keras layers, got {type(layer).__name__}")
    return [v for layer in layers for v in layer.trainable_weights]
