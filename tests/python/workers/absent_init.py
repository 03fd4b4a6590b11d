"""Rank 1 never calls hvd.init(): with 'sleep' it sleeps (longer than the
others wait for it), with 'exit' it exits with code 3 at once. The other
ranks call hvd.init() and run one allreduce."""

import os
import sys
import time

if int(os.environ["HORA_RANK"]) == 1:
    if sys.argv[1] == "exit":
        sys.exit(3)
    time.sleep(60)
    sys.exit(0)

import numpy as np  # noqa: E402

import hora.numpy as hvd  # noqa: E402

hvd.init()
hvd.allreduce(np.ones(4, np.float32), name="never")
print("done", flush=True)
