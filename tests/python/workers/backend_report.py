"""Prints what hora says about its backend and the rank's place, with the
launcher's own variables beside it, as one line per rank."""

import json
import os

import numpy as np

import hora.numpy as hvd

hvd.init()
total = hvd.allreduce(np.array([hvd.rank()]), op=hvd.Sum)
assert total[0] == hvd.size() * (hvd.size() - 1) // 2
report = {
    "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
    "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(),
    "mpi_built": hvd.mpi_built(), "mpi_enabled": hvd.mpi_enabled(), "gloo_enabled": hvd.gloo_enabled(),
    "mpi_threads_supported": hvd.mpi_threads_supported(),
    "env_rank": os.environ.get("OMPI_COMM_WORLD_RANK"), "env_local_rank": os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"),
}
hvd.shutdown()
print("REPORT " + json.dumps(report), flush=True)
