"""Leaves a shared-memory segment behind the way a killed rank can: set
rank 0 has made the segment of a new set and waits for its partner to map
it when it is SIGKILLed. Run on 3 ranks of one host (so that [0, 1] is not
the global set, which add_process_set refuses to repeat):

    shm_leftover.py OUTDIR

Rank 0 adds set [0, 1] (id 1) and starts an allreduce in it. Rank 1 never
joins the set; instead it plays its partner's first moves in the set's
store (the host identity it publishes is rank 0's, so rank 0 makes a
segment), waits until the segment is made, then makes a file named like
another job's segment (recorded nowhere in this job's store), kills rank 0
and prints ``RESULT <json>``: the segment's name, whether it was in
/dev/shm at the kill, and the other file's name. horarun must remove the
first and leave the second alone. Rank 2 only waits to be stopped.
"""

import json
import os
import secrets
import signal
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.runner.rendezvous import RendezvousClient

SET_KEYS = "process_set.1/shm/"
outdir = sys.argv[1]
pid_path = os.path.join(outdir, "pid.0")

hvd.init()
if hvd.rank() == 0:
    with open(pid_path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_path + ".tmp", pid_path)
    a = hvd.add_process_set([0, 1])
    hvd.allreduce(np.ones(1), name="never", process_set=a)
    raise SystemExit("rank 0: the allreduce in a set its partner never joined returned")
if hvd.rank() == 2:
    time.sleep(60)   # horarun stops it once rank 0 is killed
    raise SystemExit("rank 2 was not stopped")

store = RendezvousClient(os.environ["HORA_RENDEZVOUS_ADDR"], os.environ["HORA_RENDEZVOUS_PORT"],
                         os.environ["HORA_SECRET"])
# Arrive at the set's creation (src/runtime/set_presence.cc), then publish
# rank 0's host identity as this rank's.
store.set("process_set.1/present.1", b"1")
store.set(SET_KEYS + "host/1", store.get(SET_KEYS + "host/0", timeout=30))
assert store.get(SET_KEYS + "ready", timeout=30).startswith(b"ok ")
segment = store.get(SET_KEYS + "segment", timeout=30).decode().split(" ")[0]
other_job = f"hora-{os.geteuid()}-{secrets.token_hex(16)}"
os.close(os.open(os.path.join("/dev/shm", other_job), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
while not os.path.exists(pid_path):
    time.sleep(0.005)
with open(pid_path) as f:
    rank0 = int(f.read())
present = os.path.exists(os.path.join("/dev/shm", segment))
os.kill(rank0, signal.SIGKILL)
print("RESULT " + json.dumps({"segment": segment, "present_when_killed": present, "other_job": other_job}),
      flush=True)
os._exit(0)   # the global set lost rank 0; nothing is left to shut down cleanly
