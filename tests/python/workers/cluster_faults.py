"""A rank of a job on two simulated hosts, two ranks each (test_cluster.py),
that trains in a set inside its host and, at every step, in the global set,
which spans both hosts. The test cuts a host's link, kills a host's ranks or
slows the link while it runs.

    cluster_faults.py STEPS ELEMENTS

Each step (20 ms apart) allreduces ELEMENTS float32 in the host's set and in the global
set. Every rank prints ``STEP <n>`` after each step, and at the end one
``RESULT <json>`` line: the steps the host's set ran, whether its sums were
right, how many steps ran after the global set failed, and that failure's
type and text. A rank whose global set failed then re-raises that error, so
that horarun reports the job's failure.
"""

import json
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.errors import HoraError

STEPS_AFTER_FAILURE = 20

steps, elements = int(sys.argv[1]), int(sys.argv[2])
hvd.init()
rank, size = hvd.rank(), hvd.size()
host_ranks = [r for r in range(size) if r // 2 == rank // 2]
inside = hvd.add_process_set(host_ranks)
result = {"rank": rank, "local_steps": 0, "local_right": True, "steps_after_failure": 0, "error": None}
failure = None
value = np.full(elements, rank + 1, dtype=np.float32)
for step in range(steps):
    local = hvd.allreduce(value, op=hvd.Sum, name="local", process_set=inside)
    result["local_steps"] += 1
    result["local_right"] &= bool(np.all(local == sum(r + 1 for r in host_ranks)))
    if failure is None:
        try:
            total = hvd.allreduce(value, op=hvd.Sum, name="global")
            result["global_right"] = bool(np.all(total == size * (size + 1) / 2))
        except HoraError as error:
            failure = error
            result["error"], result["error_type"] = str(error), type(error).__name__
    else:
        result["steps_after_failure"] += 1
        if result["steps_after_failure"] >= STEPS_AFTER_FAILURE:
            break
    print(f"STEP {step}", flush=True)
    time.sleep(0.02)
print("RESULT " + json.dumps(result), flush=True)
if failure is not None:
    raise failure
hvd.shutdown()
