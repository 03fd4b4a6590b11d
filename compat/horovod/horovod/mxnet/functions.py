"""``horovod.mxnet.functions`` on hora."""

from hora.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
