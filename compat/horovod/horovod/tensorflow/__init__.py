"""``horovod.tensorflow`` is ``hora.tensorflow``: the same functions, classes and constants."""

from hora.tensorflow import *  # noqa: F401,F403
from hora.tensorflow import __all__  # noqa: F401
from hora.tensorflow import (  # noqa: F401
    _allreduce,
    _executing_eagerly,
    _grouped_allreduce,
    _grouped_reducescatter,
    _reducescatter,
    util,
)

# As on Horovod, the package holds its mpi_ops module (hvd.mpi_ops._basics).
from horovod.tensorflow import mpi_ops  # noqa: E402,F401
