"""``horovod.tensorflow.util`` on hora."""

from hora.tensorflow.util import _executing_eagerly, refs_to_vars, vars_to_refs  # noqa: F401
