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
    cloudpickle and broadcast over the set. Eagerly and in a TensorFlow 1
    graph it moves the object at once (as Horovod's runs its ops in
    ``session`` or the default session; hora needs no session); not inside
    ``tf.function``."""
    _at_once("broadcast_object")
    return _errors.run_eagerly(_objects.broadcast_object, obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument as ``broadcast_object`` does."""

    def broadcast(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)

    return broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every member's ``obj`` (pickled with cloudpickle), in
    set-rank order; eagerly and in a TensorFlow 1 graph, not inside
    ``tf.function``."""
    _at_once("allgather_object")
    return _errors.run_eagerly(_objects.allgather_object, obj, name, process_set)


def _at_once(what):
    """ValueError inside ``tf.function``: the object would move once, while
    the function is traced, not each time it runs."""
    if not tf.executing_eagerly() and tf.compat.v1.get_default_graph().building_function:
        raise ValueError(f"{what} moves Python objects when it is called, so it runs eagerly or in a "
                         "tf.compat.v1 graph, not inside tf.function (call it outside)")
