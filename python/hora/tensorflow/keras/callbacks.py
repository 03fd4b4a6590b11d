"""Keras callbacks for training over a process set, as ``horovod.keras``
defines them; each also takes ``process_set=`` (default: the global set).
Members outside the set do nothing in them. They are callbacks of
``tf.keras``: Keras 3, or Keras 2 (tf_keras) under TF_USE_LEGACY_KERAS=1."""

import numpy as np
import tensorflow as tf
from tensorflow import keras

from hora.common.process_sets import global_process_set
from hora.tensorflow import functions as _functions
from hora.tensorflow import reductions as _reductions
from hora.tensorflow.gradients import variable_key


def _variables_of(obj):
    variables = getattr(obj, "variables", [])
    return list(variables() if callable(variables) else variables)


def _learning_rate(optimizer):
    rate = optimizer.learning_rate
    if callable(rate) and not hasattr(rate, "numpy"):  # a schedule
        rate = rate(optimizer.iterations)
    return float(np.asarray(tf.convert_to_tensor(rate)))


def _set_learning_rate(optimizer, value):
    rate = optimizer.learning_rate
    if hasattr(rate, "assign"):
        rate.assign(value)
    else:
        optimizer.learning_rate = value


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Gives every member of the set the model's and the optimizer's
    variables as they are on ``root_rank`` (a global rank), once, when
    training starts (or after the first batch, if the model is built only
    then). ``local_variables`` (or ``register_local_var``) stay as they are."""

    def __init__(self, root_rank, device="", local_variables=None, process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.broadcast_done = False
        self._local_vars = {variable_key(v) for v in (local_variables or [])}

    def register_local_var(self, var):
        self._local_vars.add(variable_key(var))

    def _broadcast(self):
        if self.broadcast_done or not self.model.built:
            return
        if self.process_set.included():
            shared = [v for v in _variables_of(self.model) if variable_key(v) not in self._local_vars]
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None:
                shared += [v for v in _variables_of(optimizer) if variable_key(v) not in self._local_vars]
            _functions.broadcast_variables(_unique(shared), self.root_rank, process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        if self.model.built and optimizer is not None and not getattr(optimizer, "built", True):
            # Keras 3 builds the optimizer at the first step: build it now, so
            # that the first step starts from the root's state everywhere.
            optimizer.build(self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        self._broadcast()


def _unique(variables):
    seen, result = set(), []
    for v in variables:
        if variable_key(v) not in seen:
            seen.add(variable_key(v))
            result.append(v)
    return result


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages the epoch's metrics over the set at the end of each epoch,
    in place, so that later callbacks (and the History) see the averages."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.device = device
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or not self.process_set.included():
            return
        names = sorted(name for name, value in logs.items() if np.ndim(value) == 0)
        if not names:
            return
        values = tf.constant([float(logs[name]) for name in names], dtype=tf.float64)
        averaged = _reductions.allreduce(values, name="MetricAverageCallback", process_set=self.process_set)
        for name, value in zip(names, averaged.numpy().tolist()):
            logs[name] = value


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` between
    ``start_epoch`` and ``end_epoch`` (``multiplier`` a function of the
    epoch, or a constant for exponential decay), per epoch (``staircase``)
    or per batch. Scales SGD's momentum by the rate change while the rate
    moves (``momentum_correction``), when the momentum is a variable."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, process_set=global_process_set):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.process_set = process_set
        self.current_epoch = None
        self.restore_momentum = None
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier ** (epoch - start_epoch))

    def _steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError(f"Could not autodetect the number of steps per epoch; pass steps_per_epoch to "
                         f"{type(self).__name__}()")

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        _set_learning_rate(optimizer, new_lr)
        momentum = getattr(optimizer, "momentum", None)
        if self.momentum_correction and hasattr(momentum, "assign") and old_lr:
            self.restore_momentum = float(momentum.numpy())
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (self.end_epoch is not None
                                                     and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate from ``initial_lr / size`` to ``initial_lr``
    over ``warmup_epochs`` epochs, batch by batch (Goyal et al.), where size
    is the process set's."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0,
                 process_set=global_process_set):
        def multiplier(epoch):
            size = self.process_set.size()
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch,
                         process_set=process_set)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and self.process_set.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{_learning_rate(self.model.optimizer):g}.")
