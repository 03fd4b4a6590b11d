"""Broadcasting variables, and moving Python objects, over a process set.
Horovod's functions; each also takes ``process_set=``."""

import tensorflow as tf

from hora.common import objects as _objects
from hora.common.process_sets import global_process_set
from hora.tensorflow import errors as _errors
from hora.tensorflow import mpi_ops as _mpi_ops


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns every variable (TensorFlow's or Keras's) its value on
    ``root_rank`` (all broadcasts are submitted together). Works eagerly and
    inside ``tf.function``; returns the assign ops' results (None when
    ``variables`` is empty)."""
    variables = list(variables)
    if not variables:
        return None
    return _mpi_ops.broadcast_(variables, root_rank, process_set=process_set)


def broadcast_global_variables(root_rank, process_set=global_process_set):
    """Assigns TensorFlow 1's global variables (``tf.compat.v1`` graphs)
    their values on ``root_rank``. Executing eagerly there are none:
    RuntimeError, as in Horovod (use ``broadcast_variables`` or the Keras
    ``BroadcastGlobalVariablesCallback``)."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution; use "
                           "hvd.broadcast_variables(<model/optimizer variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set=process_set)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns ``obj`` as it is on ``root_rank`` (a global rank), pickled with
    cloudpickle and broadcast over the set. Eager only (``session`` is
    accepted for Horovod compatibility and must be None)."""
    _eager_only("broadcast_object", session)
    return _errors.run_eagerly(_objects.broadcast_object, obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument as ``broadcast_object`` does."""

    def broadcast(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)

    return broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every member's ``obj`` (pickled with cloudpickle), in
    set-rank order. Eager only."""
    _eager_only("allgather_object", session)
    return _errors.run_eagerly(_objects.allgather_object, obj, name, process_set)


def _eager_only(what, session):
    if session is not None:
        raise ValueError(f"{what}: hora.tensorflow runs on TensorFlow 2 and takes no session")
    if not tf.executing_eagerly():
        raise ValueError(f"{what} runs eagerly (call it outside tf.function)")
