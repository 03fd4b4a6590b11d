"""``hvd.elastic`` for TensorFlow and Keras: Horovod's elastic states on
hora's framework-free machinery (hora.common.elastic; docs/elastic.md).

- ``TensorFlowKerasState(model, optimizer=None, **attributes)``: a Keras
  model's weights and its optimizer's variables, plus any attributes.
- ``TensorFlowState(variables=None, **attributes)``: a list of
  ``tf.Variable``.
Both save NumPy copies at ``commit()``, assign them back at ``restore()``
and broadcast them from the member with the most commits at ``sync()``.
"""

from hora.common import elastic as _common
from hora.common.elastic import *  # noqa: F401,F403
from hora.common.elastic import ObjectState

__all__ = _common.__all__ + ["TensorFlowKerasState", "TensorFlowState"]


def _values(variables):
    return [variable.numpy().copy() for variable in variables]


def _assign(variables, values, what):
    if len(variables) != len(values):
        raise ValueError(f"{what}: {len(values)} saved values for {len(variables)} variables; the "
                         "model or optimizer changed shape since the state was saved")
    for variable, value in zip(variables, values):
        variable.assign(value)


def _optimizer_variables(optimizer):
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class TensorFlowState(ObjectState):
    """A list of ``tf.Variable`` plus any attributes."""

    def __init__(self, variables=None, process_set=None, **attributes):
        self.variables = list(variables or [])
        self._variables_saved = _values(self.variables)
        super().__init__(process_set=process_set, **attributes)

    def save(self):
        self._variables_saved = _values(self.variables)
        super().save()

    def restore(self):
        _assign(self.variables, self._variables_saved, "TensorFlowState")
        super().restore()

    def _sync_from(self, root, process_set):
        self._variables_saved = broadcast_object(self._variables_saved, root, process_set, "hora.elastic.variables")
        _assign(self.variables, self._variables_saved, "TensorFlowState")
        super()._sync_from(root, process_set)


class TensorFlowKerasState(ObjectState):
    """A Keras model and optimizer plus any attributes. The optimizer's
    variables exist once it has applied a step; before that only the
    model's weights are kept."""

    def __init__(self, model, optimizer=None, backend=None, process_set=None, **attributes):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._weights_saved = None
        self._optimizer_saved = None
        self._save_tensors()
        super().__init__(process_set=process_set, **attributes)

    def _save_tensors(self):
        self._weights_saved = [w.copy() for w in self.model.get_weights()]
        self._optimizer_saved = _values(_optimizer_variables(self.optimizer)) if self.optimizer is not None else []

    def _load_tensors(self):
        self.model.set_weights(self._weights_saved)
        if self.optimizer is not None and self._optimizer_saved:
            current = _optimizer_variables(self.optimizer)
            if len(current) != len(self._optimizer_saved) and callable(getattr(self.optimizer, "build", None)):
                # A new worker's optimizer has applied no step yet: make its
                # variables, then take the others'.
                self.optimizer.build(self.model.trainable_variables)
                current = _optimizer_variables(self.optimizer)
            _assign(current, self._optimizer_saved, "TensorFlowKerasState's optimizer")

    def save(self):
        self._save_tensors()
        super().save()

    def restore(self):
        self._load_tensors()
        super().restore()

    def _sync_from(self, root, process_set):
        self._weights_saved, self._optimizer_saved = broadcast_object(
            (self._weights_saved, self._optimizer_saved), root, process_set, "hora.elastic.keras")
        self._load_tensors()
        super()._sync_from(root, process_set)
