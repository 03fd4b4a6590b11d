"""A rank of a job on simulated hosts (test_cluster.py): prints, as one JSON
line, where it runs and what the global set, a set inside its host and a set
across the hosts computed."""

import json
import socket

import numpy as np

import hora.numpy as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
local = hvd.add_process_set([r for r in range(size) if r // 2 == rank // 2])
across = hvd.add_process_set([r for r in range(size) if r % 2 == rank % 2])
value = np.full(3, rank + 1, dtype=np.float32)
total = hvd.allreduce(value, op=hvd.Sum, name="global")
inside = hvd.allreduce(value, op=hvd.Sum, name="local", process_set=local)
between = hvd.allreduce(value, op=hvd.Sum, name="across", process_set=across)
print(json.dumps({"rank": rank, "host": socket.gethostname(), "local_size": hvd.local_size(),
                  "cross_size": hvd.cross_size(), "global": total.tolist(), "local": inside.tolist(),
                  "across": between.tolist()}), flush=True)
hvd.shutdown()
