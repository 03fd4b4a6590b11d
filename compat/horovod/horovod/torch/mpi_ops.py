"""``horovod.torch.mpi_ops``: the collectives and basics of ``hora.torch``."""

from hora.torch import *  # noqa: F401,F403

import hora.torch as _front_end  # noqa: E402
from horovod.common.basics import HorovodBasics as _HorovodBasics  # noqa: E402

_basics = _HorovodBasics(_front_end)
