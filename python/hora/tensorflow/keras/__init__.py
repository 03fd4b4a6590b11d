"""hora for Keras on TensorFlow: the API of ``horovod.tensorflow.keras`` on
process sets, for Keras 3 (``keras``, which is ``tf.keras`` in TensorFlow
2.16+) and, when installed, Keras 2 (``tf_keras``).

>>> import hora.tensorflow.keras as hvd
>>> hvd.init()
>>> my_set = hvd.ProcessSet([0, 2]) if hvd.rank() % 2 == 0 else hvd.ProcessSet([1, 3])
>>> model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=my_set), loss="mse")
>>> model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(my_set.ranks[0],
...                                                                          process_set=my_set)])
"""

import tensorflow as tf

from hora.common import api as _api
from hora.common.api import *  # noqa: F401,F403
from hora.common.api import Average, global_process_set
from hora.tensorflow import functions as _functions
from hora.tensorflow import mpi_ops as _mpi_ops
from hora.tensorflow import reductions as _reductions
from hora.tensorflow.compression import Compression  # noqa: F401
from hora.tensorflow.keras import callbacks  # noqa: F401
from hora.tensorflow.keras import elastic  # noqa: F401
from hora.tensorflow.keras.optimizer import (  # noqa: F401
    DistributedOptimizer,
    PartialDistributedOptimizer,
    distributed_class,
)

__all__ = _api.__all__ + [
    "Compression", "DistributedOptimizer", "PartialDistributedOptimizer", "allgather", "allreduce", "broadcast",
    "broadcast_global_variables", "callbacks", "elastic", "load_model", "reducescatter",
]


def broadcast_global_variables(root_rank, process_set=global_process_set):
    """TensorFlow 1's global variables from ``root_rank``
    (``hora.tensorflow.broadcast_global_variables``: a RuntimeError when
    executing eagerly; use ``callbacks.BroadcastGlobalVariablesCallback``)."""
    return _functions.broadcast_global_variables(root_rank, process_set=process_set)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, process_set=global_process_set):
    """``value`` (anything tf.constant takes) reduced over the set (default: Average)."""
    return _reductions.allreduce(tf.constant(value), average=average, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, op=op, compression=compression, name=name,
                                 process_set=process_set)


def allgather(value, name=None, process_set=global_process_set):
    """Every member's ``value`` concatenated along the first dimension."""
    return _mpi_ops.allgather(tf.constant(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """``value`` as it is on ``root_rank``."""
    return _mpi_ops.broadcast(tf.constant(value), root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """This member's block of ``value`` reduced over the set."""
    return _reductions.reducescatter(tf.constant(value), name=name, op=op, process_set=process_set)


def _optimizer_classes(base):
    """Every subclass of the optimizer class ``base``."""
    found, pending = [], list(base.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls not in found and getattr(cls, "_hora_base", None) is None:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return found


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False, process_set=global_process_set):
    """``tf.keras.models.load_model(filepath)`` with the model's optimizer
    made a DistributedOptimizer over ``process_set`` (its state as saved).
    ``custom_optimizers`` are optimizer classes beyond Keras's own;
    ``legacy_opts`` wraps Keras 2's ``optimizers.legacy`` ones instead."""
    keras_module = tf.keras
    base = keras_module.optimizers.legacy.Optimizer if legacy_opts else keras_module.optimizers.Optimizer
    options = {"compression": compression, "sparse_as_dense": False, "op": Average, "groups": None,
               "gradient_predivide_factor": 1.0, "process_set": process_set, "backward_passes_per_step": 1,
               "average_aggregated_gradients": False, "scale_local_gradients": True}
    classes = _optimizer_classes(base) + list(custom_optimizers or [])
    objects = {}
    for cls in classes:
        wrapped = distributed_class(cls, options)
        objects[cls.__name__] = wrapped
        objects[cls.__name__.lower()] = wrapped
    objects.update(custom_objects or {})
    return keras_module.models.load_model(filepath, custom_objects=objects)
