"""Two process sets train side by side while one rank dies or hangs. Run on 4
ranks under ``horarun --keep-going``:

    fault_domains.py MODE OUTDIR

Sets A=[0, 1] and B=[2, 3] (ids 1 and 2) each fit a linear model by
data-parallel SGD through hora.numpy: every step each member computes the
gradient on its own shard and the set averages it. MODE:

- ``none``: nobody fails.
- ``kill``: rank 1 SIGKILLs itself at step FAIL_STEP.
- ``stop``: rank 1 SIGSTOPs itself at step FAIL_STEP; rank 0, once A has
  failed, sends it SIGCONT, and rank 1 then finds A broken and exits 3.
- ``kill-outsider``: rank 3 (in B and the global set, not in A) SIGKILLs
  itself; ranks 0 and 1 then see the global set fail and A keep working.

The failing rank writes OUTDIR/event.json (time, pid) just before it
fails. Every surviving rank prints one line ``RESULT <json>``: its final
parameters (as float.hex strings, so runs compare exactly), its training
time, and what failed with which message and how long after the event.
"""

import json
import os
import signal
import sys
import time

import numpy as np

import hora.numpy as hvd
from hora.errors import PeerFailureError

STEPS = int(os.environ.get("FAULT_STEPS", "60"))
FAIL_STEP = int(os.environ.get("FAULT_FAIL_STEP", "15"))
ROWS = int(os.environ.get("FAULT_ROWS", "4000"))
FEATURES = 32
LEARNING_RATE = 0.05

mode, outdir = sys.argv[1], sys.argv[2]
event_path = os.path.join(outdir, "event.json")

a, b = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[a, b])
me = hvd.rank()
my_set = a if a.included() else b
result = {"rank": me}


def shard(set_id, set_rank):
    """This member's data: the same on every run."""
    rng = np.random.default_rng(1000 * set_id + set_rank)
    truth = np.random.default_rng(set_id).normal(size=FEATURES)
    x = rng.normal(size=(ROWS, FEATURES))
    return x, x @ truth + 0.01 * rng.normal(size=ROWS)


def fail_here():
    with open(event_path + ".tmp", "w") as f:
        json.dump({"time": time.time(), "pid": os.getpid()}, f)
    os.replace(event_path + ".tmp", event_path)
    os.kill(os.getpid(), signal.SIGKILL if mode.startswith("kill") else signal.SIGSTOP)


def wait_for_event():
    while not os.path.exists(event_path):
        time.sleep(0.01)
    with open(event_path) as f:
        return json.load(f)


def peer_failure(action):
    """Runs ``action``, which must raise PeerFailureError; returns its message
    and how long after the event it came."""
    try:
        action()
    except PeerFailureError as error:
        return {"message": str(error), "after_event_seconds": time.time() - wait_for_event()["time"]}
    raise AssertionError(f"rank {me}: expected a PeerFailureError")


def train():
    x, y = shard(my_set.process_set_id, my_set.rank())
    w = np.zeros(FEATURES)
    start = time.perf_counter()
    for step in range(STEPS):
        if step == FAIL_STEP and ((mode in ("kill", "stop") and me == 1) or (mode == "kill-outsider" and me == 3)):
            fail_here()
        if mode == "kill-outsider" and me in (0, 1) and step == FAIL_STEP + 5:
            # The global set contains rank 3: it fails; A goes on below.
            wait_for_event()
            result["global"] = peer_failure(lambda: hvd.allreduce(np.ones(1), name="world.check"))
        grad = x.T @ (x @ w - y) / ROWS
        w -= LEARNING_RATE * hvd.allreduce(grad, op=hvd.Average, name="grad", process_set=my_set)
    result["train_seconds"] = time.perf_counter() - start
    return w


try:
    result["params"] = [float(v).hex() for v in train()]
except PeerFailureError as error:
    result["set_failure"] = {"message": str(error),
                             "after_event_seconds": time.time() - wait_for_event()["time"]}
    if me == 1:  # resumed after SIGSTOP: the set it hung in has moved on without it
        print("RESULT " + json.dumps(result), flush=True)
        sys.exit(3)
    if mode == "stop":
        os.kill(wait_for_event()["pid"], signal.SIGCONT)
    # A broken set can be removed; later ops on it are refused.
    result["removed"] = hvd.remove_process_set(my_set)

# The survivors of the failing set and the other set make a new set
# together, once the failing set's survivors are done with it (creating a
# set waits for its members only up to the op timeout).
survivors = {"none": None, "kill": [0, 2, 3], "stop": [0, 2, 3], "kill-outsider": [0, 1, 2]}[mode]
ready_path = os.path.join(outdir, f"ready.{me}")
open(ready_path, "w").close()
if survivors and me in survivors:
    while not all(os.path.exists(os.path.join(outdir, f"ready.{r}")) for r in survivors):
        time.sleep(0.01)
    together = hvd.add_process_set(survivors)
    result["survivors_sum"] = float(together.allreduce(np.array([float(me)]), op=hvd.Sum)[0])
print("RESULT " + json.dumps(result), flush=True)
