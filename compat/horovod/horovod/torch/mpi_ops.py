"""``horovod.torch.mpi_ops``: the collectives and basics of ``hora.torch``."""

from hora.torch import *  # noqa: F401,F403
