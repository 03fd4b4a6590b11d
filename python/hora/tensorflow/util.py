"""Helpers ``horovod.tensorflow.util`` has that scripts and Horovod's tests import."""

import tensorflow as tf


def _executing_eagerly():
    """Whether ops run at once (outside tf.function)."""
    return tf.executing_eagerly()


def vars_to_refs(variables):
    """The ``ref()`` of each variable (hashable), nested lists kept."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    """The inverse of ``vars_to_refs``."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
