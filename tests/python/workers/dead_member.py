"""Rank 3 is killed (SIGKILL) before it makes any set; rank 0 then makes the
set [0, 3] and uses it. Rank 0 prints the error it got, as JSON, and how long
after the call it came."""

import json
import os
import signal
import time

import numpy as np

import hora.numpy as hvd

hvd.init()
if hvd.rank() == 3:
    os.kill(os.getpid(), signal.SIGKILL)
if hvd.rank() == 0:
    time.sleep(1.0)   # horarun has seen rank 3 end by now
    start = time.monotonic()
    try:
        pair = hvd.add_process_set([0, 3])
        hvd.allreduce(np.ones(1, dtype=np.float32), process_set=pair)
        outcome = {"error": None}
    except Exception as error:   # noqa: BLE001: the test reads its type and text
        outcome = {"error": type(error).__name__, "message": str(error)}
    outcome["seconds"] = time.monotonic() - start
    print(json.dumps({"DEAD_MEMBER": outcome}), flush=True)
