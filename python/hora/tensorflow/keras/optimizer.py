"""DistributedOptimizer for Keras: reduces gradients over a process set
before the wrapped optimizer applies them.

Keras 3 (``keras``, what ``tf.keras`` is in TensorFlow 2.16+) optimizers
apply gradients in ``apply``, which ``apply_gradients`` and ``model.fit``
call; Keras 2 optimizers (``tf_keras``, when installed) in
``apply_gradients``. The wrapper is a subclass of the optimizer's class
with the same name and module, so a saved model loads without hora, and it
is made from the optimizer's config, as Horovod does.
"""

import tensorflow as tf

from hora.common.core_types import Average
from hora.common.process_sets import global_process_set
from hora.tensorflow.compression import Compression
from hora.tensorflow.gradients import (
    GradientReduction,
    checked_options,
    local_variables_of,
    reduce_with_locals,
    variable_key,
)


class GradientAggregation:
    """Accumulates gradients locally for ``passes`` calls and lets every
    ``passes``-th call apply them (``backward_passes_per_step``). ``counter``
    (a variable) counts the passes since the last update."""

    def __init__(self, passes, average):
        self.passes = passes
        self.average = average
        self.counter = tf.Variable(0, dtype=tf.int32, trainable=False, name="hora_aggregation_counter")
        self.sums = None

    def build(self, variables):
        self.sums = [tf.Variable(tf.zeros(v.shape, dtype=v.dtype), trainable=False) for v in variables]

    def add(self, grads):
        """Adds ``grads`` (dense or IndexedSlices; None skipped) and counts the pass."""
        for total, g in zip(self.sums, grads):
            if g is not None:
                total.assign_add(tf.convert_to_tensor(g))
        self.counter.assign_add(1)

    def totals(self, grads):
        """The accumulated gradients (averaged over the passes if asked)."""
        return [None if g is None else (total / self.passes if self.average else tf.identity(total))
                for total, g in zip(self.sums, grads)]

    def reset(self):
        for total in self.sums:
            total.assign(tf.zeros_like(total))
        self.counter.assign(0)


class _DistributedMethods:
    """The methods of the class ``DistributedOptimizer`` makes, shared by
    Keras 3 and Keras 2 optimizers. ``_hora_options`` (class attribute) holds
    the wrapper's arguments; per-instance state is made on first use."""

    _hora_options = None
    _hora_base = None

    def _hora_state(self):
        state = self.__dict__.get("_hora_state_value")
        if state is None:
            options = self._hora_options
            state = {"reduction": GradientReduction(options["compression"], options["sparse_as_dense"],
                                                    options["op"], options["gradient_predivide_factor"],
                                                    options["groups"], options["process_set"]),
                     "locals": set(), "reduced_already": False}
            self.__dict__["_hora_state_value"] = state
        return state

    @property
    def process_set(self):
        return self._hora_options["process_set"]

    @property
    def _agg_helper(self):
        """The local gradient aggregation (None unless backward_passes_per_step > 1)."""
        return self.__dict__.get("_hora_aggregation")

    def register_local_var(self, var):
        """Keeps the gradient of ``var`` local to this worker."""
        self._hora_state()["locals"].add(variable_key(var))

    def _hora_reduce(self, grads, variables):
        state = self._hora_state()
        if state["reduced_already"]:
            state["reduced_already"] = False
            return list(grads)
        return reduce_with_locals(state["reduction"], grads, variables, state["locals"],
                                  self._hora_options["scale_local_gradients"])

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """``(gradient, variable)`` pairs of ``loss`` (a tensor recorded on
        ``tape``, or a callable), reduced over the process set (Horovod's
        hook; the next apply does not reduce them again)."""
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                tape.watch(var_list)
                loss = loss()
        grads = tape.gradient(loss, var_list, grad_loss)
        if self._agg_helper is None:
            grads = self._hora_reduce(grads, var_list)
            self._hora_state()["reduced_already"] = True
        return list(zip(grads, var_list))

    def compute_gradients(self, loss, var_list, tape=None):
        return self._compute_gradients(loss, var_list, None, tape)

    def _hora_step(self, grads, variables, apply_reduced):
        """Reduces ``grads`` and calls ``apply_reduced(grads)``, or, with
        gradient aggregation, does so every ``backward_passes_per_step``-th
        call and only counts the iteration otherwise."""
        aggregation = self._agg_helper
        if aggregation is None:
            return apply_reduced(self._hora_reduce(grads, variables))
        if aggregation.sums is None:
            aggregation.build(variables)
        aggregation.add(grads)

        def update():
            apply_reduced(self._hora_reduce(aggregation.totals(grads), variables))
            aggregation.reset()
            return tf.constant(True)

        def count_only():
            self.iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            return update() if int(aggregation.counter.numpy()) >= aggregation.passes else count_only()
        return tf.cond(aggregation.counter >= aggregation.passes, update, count_only)


class _Keras3Methods(_DistributedMethods):
    """Keras 3: every update goes through ``apply``."""

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if trainable_variables is None:
            variables = list(self._trainable_variables)
        else:
            variables = list(trainable_variables)
            if not self.built:
                self.build(variables)
                self.built = True
        base = self._hora_base
        self._hora_step(grads, variables, lambda reduced: base.apply(self, reduced, variables))


class _Keras2Methods(_DistributedMethods):
    """Keras 2 (tf_keras): every update goes through ``apply_gradients``."""

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads, variables = zip(*list(grads_and_vars))
        base = self._hora_base
        return self._hora_step(list(grads), list(variables),
                               lambda reduced: base.apply_gradients(self, list(zip(reduced, variables)), *args,
                                                                    **kwargs))


def is_keras_optimizer(optimizer):
    return hasattr(optimizer, "get_config") and (hasattr(optimizer, "apply") or hasattr(optimizer, "apply_gradients"))


def distributed_class(base, options):
    """A subclass of the optimizer class ``base`` that reduces gradients
    as ``options`` say (same name and module as ``base``)."""
    methods = _Keras3Methods if hasattr(base, "stateless_apply") else _Keras2Methods
    namespace = {}
    for cls in reversed(methods.__mro__[:-1]):
        namespace.update({k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__", "__doc__")})
    namespace.update({"_hora_options": dict(options), "_hora_base": base, "__module__": base.__module__,
                      "__qualname__": base.__qualname__, "__doc__": base.__doc__})
    return type(base.__name__, (base,), namespace)


def make_distributed(optimizer_class_or_instance, options):
    """An instance of ``distributed_class`` made from the optimizer's config."""
    optimizer = optimizer_class_or_instance
    if getattr(type(optimizer), "_hora_base", None) is not None:
        base = type(optimizer)._hora_base
    else:
        base = type(optimizer)
    distributed = distributed_class(base, options).from_config(optimizer.get_config())
    passes = options["backward_passes_per_step"]
    if passes > 1:
        distributed.__dict__["_hora_aggregation"] = GradientAggregation(passes,
                                                                       options["average_aggregated_gradients"])
    return distributed


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps a Keras optimizer so that it applies gradients reduced (default:
    averaged) over ``process_set``. Members outside the set apply their own
    gradients. With ``backward_passes_per_step`` > 1, gradients are summed
    locally (averaged if ``average_aggregated_gradients``) and reduced and
    applied every that many calls; the iteration count still advances each
    call. ``name`` and ``device_*`` are accepted for compatibility."""
    if not is_keras_optimizer(optimizer):
        raise ValueError(f"DistributedOptimizer wraps a Keras optimizer, got {type(optimizer).__name__}")
    op, groups = checked_options(op, gradient_predivide_factor, num_groups, groups)
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    options = {"compression": compression, "sparse_as_dense": sparse_as_dense, "op": op, "groups": groups,
               "gradient_predivide_factor": gradient_predivide_factor, "process_set": process_set,
               "backward_passes_per_step": backward_passes_per_step,
               "average_aggregated_gradients": average_aggregated_gradients,
               "scale_local_gradients": scale_local_gradients}
    return make_distributed(optimizer, options)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """``DistributedOptimizer`` that keeps the gradients of the variables of
    ``local_layers`` (Keras layers) local."""
    distributed = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                       gradient_predivide_factor, op, backward_passes_per_step,
                                       average_aggregated_gradients, 0, groups, process_set, scale_local_gradients)
    for var in local_variables_of(local_layers):
        distributed.register_local_var(var)
    return distributed
