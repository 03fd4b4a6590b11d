"""``horovod.mxnet`` is ``hora.mxnet``: the same functions, classes and constants."""

from hora.mxnet import *  # noqa: F401,F403
from hora.mxnet import __all__  # noqa: F401

# As on Horovod, the package holds its mpi_ops module (hvd.mpi_ops._basics).
from horovod.mxnet import mpi_ops  # noqa: E402,F401
