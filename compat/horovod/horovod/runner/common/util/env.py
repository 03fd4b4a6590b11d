"""``horovod.runner.common.util.env``: the rank and size that the launcher
gave this process, read before ``hvd.init()``."""

import os

from hora.common import launchers

# (rank, size) variables in the order hora's core reads them: horarun's
# (and the HOROVOD_ names it also sets), then the MPI launchers'.
RANK_AND_SIZE_VARIABLES = (("HORA_RANK", "HORA_SIZE"), ("HOROVOD_RANK", "HOROVOD_SIZE"),
                           ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))


def get_env_rank_and_size():
    """(rank, size) from the launcher's variables: horarun, horovodrun,
    mpirun, torchrun or srun; (0, 1) when none started this process.
    RuntimeError when only one of a pair is set, as on Horovod."""
    for rank_variable, size_variable in RANK_AND_SIZE_VARIABLES:
        rank, size = os.environ.get(rank_variable), os.environ.get(size_variable)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError(f"Could not determine process rank and size: only one of {rank_variable} and "
                               f"{size_variable} found in environment")
    found = launchers.coordinates(os.environ)
    if found is not None:
        _, rank, size = found[:3]
        return rank, size
    return 0, 1
