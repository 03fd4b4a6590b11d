"""``horovod.torch`` is ``hora.torch``: the same functions, classes and constants."""

from hora.torch import *  # noqa: F401,F403
from hora.torch import __all__  # noqa: F401

# As on Horovod, the package holds its mpi_ops module (hvd.mpi_ops._basics).
from horovod.torch import mpi_ops  # noqa: E402,F401
