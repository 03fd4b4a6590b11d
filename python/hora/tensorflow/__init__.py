"""hora for TensorFlow 2: the API of ``horovod.tensorflow`` on process sets.

>>> import hora.tensorflow as hvd
>>> hvd.init()
>>> even = hvd.ProcessSet(range(0, hvd.size(), 2))
>>> odd = hvd.ProcessSet(range(1, hvd.size(), 2))
>>> my_set = even if even.included() else odd
>>> with tf.GradientTape() as tape:
...     loss = loss_fn(model(x), y)
>>> tape = hvd.DistributedGradientTape(tape, process_set=my_set)
>>> grads = tape.gradient(loss, model.trainable_variables)

Eager tensors reach the core through DLPack; inside ``tf.function`` every
op is one ``tf.py_function`` node. Nothing is compiled against TensorFlow.
See docs/frameworks.md.
"""

import sys as _sys

import tensorflow as _tf

from hora.common import adapters as _adapters
from hora.common import api as _api
from hora.common.api import *  # noqa: F401,F403
from hora.common.api import Adasum, Average, global_process_set
from hora.tensorflow import errors as _errors
from hora.tensorflow import util  # noqa: F401
from hora.tensorflow.adapter import collectives as _collectives
from hora.tensorflow.compression import Compression  # noqa: F401
from hora.tensorflow.functions import (  # noqa: F401
    allgather_object,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from hora.tensorflow.gradients import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from hora.tensorflow.mpi_ops import (  # noqa: F401
    _allreduce,
    _grouped_allreduce,
    _grouped_reducescatter,
    _reducescatter,
    allgather,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    grouped_allgather,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)
from hora.tensorflow.reductions import (  # noqa: F401
    allreduce,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from hora.tensorflow.util import _executing_eagerly  # noqa: F401
from hora.tensorflow import elastic  # noqa: F401,E402  (hvd.elastic)

__all__ = _api.__all__ + [
    "Compression", "DistributedGradientTape", "DistributedOptimizer", "PartialDistributedGradientTape",
    "SyncBatchNormalization", "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
    "broadcast_", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "elastic", "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "join", "local_rank_op",
    "local_size_op", "process_set_included_op", "rank_op", "reducescatter", "size_op",
]


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """An optimizer that averages gradients over ``process_set`` before
    applying them: for a Keras optimizer, ``hora.tensorflow.keras.DistributedOptimizer``;
    for TensorFlow 1's ``tf.compat.v1.train.Optimizer``, one whose
    ``compute_gradients`` reduces them (hora.tensorflow.optimizer_v1; every
    step, in graphs and eagerly)."""
    if isinstance(optimizer, _tf.compat.v1.train.Optimizer):
        from hora.tensorflow.gradients import checked_options
        from hora.tensorflow.optimizer_v1 import distributed_optimizer_v1

        if op == Adasum:
            raise ValueError("op == Adasum is not supported by hora's DistributedOptimizer")
        op, groups = checked_options(op, gradient_predivide_factor, num_groups, groups)
        return distributed_optimizer_v1(optimizer, name, use_locking, compression, sparse_as_dense, op,
                                        gradient_predivide_factor, groups, process_set, backward_passes_per_step)
    from hora.tensorflow.keras.optimizer import DistributedOptimizer as keras_optimizer

    if op == Adasum:
        raise ValueError("op == Adasum is not supported with Keras optimizers")
    return keras_optimizer(optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
                           compression=compression, sparse_as_dense=sparse_as_dense,
                           gradient_predivide_factor=gradient_predivide_factor, op=op,
                           backward_passes_per_step=backward_passes_per_step,
                           average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
                           groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def __getattr__(name):
    # The Keras layer is made on first use: importing Keras costs a second.
    if name == "SyncBatchNormalization":
        from hora.tensorflow.sync_batch_norm import SyncBatchNormalization

        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Graph-mode failures raise hora's error types too; AutoGraph leaves hora alone.
_errors.install()
_errors.keep_hora_out_of_autograph()
# ProcessSet.allreduce(tensor) and friends take TensorFlow tensors to this module.
_adapters.register(_collectives.adapter, _sys.modules[__name__])
