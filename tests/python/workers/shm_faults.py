"""A process set over shared memory whose member dies, hangs or raises in
the middle of its ops. Run on 3 ranks of one host:

    shm_faults.py MODE VICTIM OUTDIR

Set A = [0, 1] (id 1) runs 256 KiB allreduces in a loop; rank 2, outside
A, is the observer. Once A has run a few steps (OUTDIR/running), rank 2
acts on A's member VICTIM, as MODE says:

- ``none``: nothing; A runs STEPS steps and every rank exits normally.
- ``kill``: SIGKILL, while both members are inside A's ops.
- ``stop``: SIGSTOP; once the survivor reports A's failure (OUTDIR/failed),
  SIGCONT, after which the victim finds A broken and exits 3.
- ``raise``: nothing; the victim raises an exception at the next step and
  exits through it (exit status 1).

Rank 2 (for ``raise``, the victim) writes the time of the failure to
OUTDIR/event.json. Rank 2 prints
``SEGMENTS <json>`` once A runs: the shared-memory segment records of the
global set and of A, read from the job's store (the segments' names, so
that the test can look for them in /dev/shm after the job). Every rank
that finishes prints ``RESULT <json>``: A's members whether A's segment was
already gone from /dev/shm after A's first op, the survivor A's failure
(message, seconds after the event).
"""

import json
import os
import signal
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.errors import PeerFailureError
from hora.runner.rendezvous import RendezvousClient

STEPS = 40
RUNNING_STEP = 5
SEGMENT_RECORD_KEYS = ("process_set.0/shm/segment", "process_set.1/shm/segment")

mode, victim, outdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
survivor = 1 - victim


def path(name):
    return os.path.join(outdir, name)


def mark(name, content=""):
    with open(path(name) + ".tmp", "w") as f:
        f.write(content)
    os.replace(path(name) + ".tmp", path(name))


def wait_for(name, seconds=60):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path(name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {hvd.rank()}: {name} did not appear")
        time.sleep(0.005)
    with open(path(name)) as f:
        return f.read()


def segment_records():
    """{store key: record}: "<name> <bytes>", or "-<why>" for a set without one."""
    client = RendezvousClient(os.environ["HORA_RENDEZVOUS_ADDR"], os.environ["HORA_RENDEZVOUS_PORT"],
                              os.environ["HORA_SECRET"])
    with client:
        return {key: client.get(key, timeout=5).decode() for key in SEGMENT_RECORD_KEYS}


def observe():
    """Rank 2: reports the segments, then acts on the victim."""
    wait_for("running")
    print("SEGMENTS " + json.dumps(segment_records()), flush=True)
    victim_pid = int(wait_for(f"pid.{victim}"))
    if mode in ("kill", "stop"):
        os.kill(victim_pid, signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        mark("event.json", json.dumps({"time": time.time()}))
    if mode == "stop":
        wait_for("failed")
        os.kill(victim_pid, signal.SIGCONT)
    return {}


def run_member(a):
    me = hvd.rank()
    mark(f"pid.{me}", str(os.getpid()))
    grad = np.ones(64 << 10, dtype=np.float32)
    result = {}
    hvd.allreduce_(grad, op=hvd.Average, name="grad", process_set=a)
    record = segment_records()["process_set.1/shm/segment"]
    result["segment_gone_after_first_op"] = not os.path.exists("/dev/shm/" + record.split(" ")[0])
    endless = mode in ("kill", "stop")
    step = 1
    try:
        while endless or step < STEPS:
            if step == RUNNING_STEP and me == 0:
                mark("running")
            if mode == "raise" and me == victim and os.path.exists(path("running")):
                mark("event.json", json.dumps({"time": time.time()}))
                raise RuntimeError(f"rank {me} gives up mid-training")
            hvd.allreduce_(grad, op=hvd.Average, name="grad", process_set=a)
            step += 1
    except PeerFailureError as error:
        failed_at = time.time()
        event = json.loads(wait_for("event.json"))
        result["set_failure"] = {"message": str(error), "after_event_seconds": failed_at - event["time"]}
        if me == victim:   # resumed after SIGSTOP: A went on without it
            print("RESULT " + json.dumps(result), flush=True)
            sys.exit(3)
        mark("failed")
    return result


hvd.init()
a = hvd.add_process_set([0, 1])
result = observe() if hvd.rank() == 2 else run_member(a)
print("RESULT " + json.dumps(result), flush=True)
