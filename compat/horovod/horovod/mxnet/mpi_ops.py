"""``horovod.mxnet.mpi_ops``: the ops and basics of ``hora.mxnet``."""

from hora.mxnet import *  # noqa: F401,F403
from hora.mxnet.mpi_ops import *  # noqa: F401,F403
