"""Known traffic on two process sets, then a pause while the test scrapes
each rank's HORA_METRICS_PORT endpoint.

    metrics_http.py OUTDIR

Run on 3 ranks: set 1 = [0, 1] runs ALLREDUCES allreduces of ALLREDUCE_BYTES
bytes named "grad"; the global set runs BROADCASTS broadcasts of
BROADCAST_BYTES bytes.
Each rank then writes OUTDIR/ready.<rank> (the port it serves on) and waits
for OUTDIR/go, takes hvd.metrics() of its sets (the same moment the test
scraped), waits until every rank has (OUTDIR/read.<rank>), shuts down and
prints ``RESULT <json>`` with those metrics and whether its port still
answers.
"""

import json
import os
import socket
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.common import metrics_http

ALLREDUCES, ALLREDUCE_BYTES = 5, 4096
BROADCASTS, BROADCAST_BYTES = 2, 64

outdir = sys.argv[1]
pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
for _ in range(ALLREDUCES if pair.included() else 0):
    hvd.allreduce(np.ones(ALLREDUCE_BYTES // 4, np.float32), name="grad", process_set=pair)
for _ in range(BROADCASTS):
    hvd.broadcast(np.ones(BROADCAST_BYTES // 8, np.float64), root_rank=0, name="lr")

port = metrics_http.serving_port()
with open(os.path.join(outdir, f"ready.{hvd.rank()}.tmp"), "w") as f:
    f.write(str(port))
os.rename(os.path.join(outdir, f"ready.{hvd.rank()}.tmp"), os.path.join(outdir, f"ready.{hvd.rank()}"))
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(outdir, "go")) and time.monotonic() < deadline:
    time.sleep(0.05)

metrics = {str(set_id): found for set_id, found in hvd.metrics().items()}
# Every rank reads its metrics before any shuts down: a rank that has left
# breaks the sets it was in, and the page was scraped before that.
open(os.path.join(outdir, f"read.{hvd.rank()}"), "w").close()
deadline = time.monotonic() + 60
while (not all(os.path.exists(os.path.join(outdir, f"read.{r}")) for r in range(hvd.size()))
       and time.monotonic() < deadline):
    time.sleep(0.01)
hvd.shutdown()
with socket.socket() as probe:
    answers = probe.connect_ex(("127.0.0.1", port)) == 0
print("RESULT " + json.dumps({"port": port, "metrics": metrics, "answers_after_shutdown": answers}), flush=True)
