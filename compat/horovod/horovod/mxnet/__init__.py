"""``horovod.mxnet`` is ``hora.mxnet``: the same functions, classes and constants."""

from hora.mxnet import *  # noqa: F401,F403
from hora.mxnet import __all__  # noqa: F401
