"""A member of set A=[0, 1] is late with, or never submits, an op. Run on 4
ranks:

    stall.py late OUTDIR    rank 1 submits 'lonely' 2.5 s after rank 0; the
                            op completes (the stall inspector warns meanwhile)
    stall.py never OUTDIR   rank 1 never submits 'lonely': with
                            HOROVOD_STALL_SHUTDOWN_TIME_SECONDS set, the op
                            fails on rank 0, and A is broken on rank 1 too

Ranks 2 and 3 take no part. Each member of A prints ``RESULT <json>``.
"""

import json
import os
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.errors import PeerFailureError

mode, outdir = sys.argv[1], sys.argv[2]
marker = os.path.join(outdir, "rank0_failed")
a = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[a])
me = hvd.rank()
result = {"rank": me}


def error_of(action):
    try:
        action()
    except PeerFailureError as error:
        return str(error)
    raise AssertionError(f"rank {me}: expected a PeerFailureError")


if me == 0:
    if mode == "late":
        result["sum"] = float(a.allreduce(np.ones(1), name="lonely", op=hvd.Sum)[0])
    else:
        result["error"] = error_of(lambda: a.allreduce(np.ones(1), name="lonely"))
        open(marker, "w").close()
elif me == 1:
    if mode == "late":
        time.sleep(2.5)
        result["sum"] = float(a.allreduce(np.ones(1), name="lonely", op=hvd.Sum)[0])
    else:
        while not os.path.exists(marker):
            time.sleep(0.02)
        # The verdict reached this rank as well: A is broken here too.
        result["error"] = error_of(lambda: a.allreduce(np.ones(1), name="other"))
if me in (0, 1):
    print("RESULT " + json.dumps(result), flush=True)
