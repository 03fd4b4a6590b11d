"""``DistributedOptimizer`` for TensorFlow 1 optimizers
(``tf.compat.v1.train.Optimizer``), as ``horovod.tensorflow`` has it: the
gradients that ``compute_gradients`` returns are reduced over the process
set (``GradientReduction``, the tape's reduction); ``apply_gradients`` and
the slots are the wrapped optimizer's. Works in ``tf.compat.v1`` graphs
(``minimize`` builds the allreduces into the graph) and eagerly.
"""

import tensorflow as tf

from hora.tensorflow.gradients import GradientReduction


class DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """Wraps ``optimizer``; ``reduction`` reduces its gradients."""

    def __init__(self, optimizer, reduction, name=None, use_locking=False):
        if name is None:
            name = f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._reduction = reduction

    @property
    def process_set(self):
        return self._reduction.process_set

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``(gradient, variable)`` pairs, the
        gradients reduced over the set (None gradients stay None)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._reduction(list(grads), list(variables)), variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def distributed_optimizer_v1(optimizer, name, use_locking, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set, backward_passes_per_step):
    if backward_passes_per_step != 1:
        raise ValueError("hora's DistributedOptimizer for tf.compat.v1.train optimizers reduces every step "
                         f"(backward_passes_per_step=1), got backward_passes_per_step={backward_passes_per_step}; "
                         "Keras optimizers accumulate gradients over several passes")
    reduction = GradientReduction(compression, sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    return DistributedOptimizerV1(optimizer, reduction, name, use_locking)
