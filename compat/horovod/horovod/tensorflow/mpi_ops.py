"""``horovod.tensorflow.mpi_ops``: the ops and basics of ``hora.tensorflow``."""

from hora.tensorflow import *  # noqa: F401,F403
from hora.tensorflow.mpi_ops import *  # noqa: F401,F403
from hora.tensorflow.mpi_ops import _allreduce, _grouped_allreduce, _grouped_reducescatter, _reducescatter  # noqa: F401

import hora.tensorflow as _front_end  # noqa: E402
from horovod.common.basics import HorovodBasics as _HorovodBasics  # noqa: E402

_basics = _HorovodBasics(_front_end)
