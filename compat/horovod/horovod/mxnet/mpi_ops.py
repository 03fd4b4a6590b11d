"""``horovod.mxnet.mpi_ops``: the ops and basics of ``hora.mxnet``."""

from hora.mxnet import *  # noqa: F401,F403
from hora.mxnet.mpi_ops import *  # noqa: F401,F403

import hora.mxnet as _front_end  # noqa: E402
from horovod.common.basics import HorovodBasics as _HorovodBasics  # noqa: E402

_basics = _HorovodBasics(_front_end)
