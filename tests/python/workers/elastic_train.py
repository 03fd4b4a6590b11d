"""An elastic training job for tests/python/test_elastic.py, run by
``horarun --min-np ... --host-discovery-script ...``:

    elastic_train.py OUTDIR STEPS [--kill WORKER@STEP] [--grow HOSTSFILE@STEP:LINE] [--step-time S]

A linear model trained by SGD: at step t, rank r of n uses the sample
x = sample(t, r) (a function of both), the gradients are averaged over the
world, and the state (model, optimizer, step) is committed after every
step. --kill makes worker WORKER (host:slot) SIGKILL itself before step
STEP of the first round; --grow makes rank 0 append LINE to HOSTSFILE (the
discovery script's list) after committing step STEP; --step-time makes
each step last at least S seconds (the time new workers need to start
must fall inside training). Each worker that
finishes writes OUTDIR/<worker>.json: the final weights, and per round the
world size, the step it (re)started from and the time; the killed worker
writes the time of its death to OUTDIR/killed_at, the growing rank 0 the
time it added the host to OUTDIR/grown_at.
"""

import json
import os
import signal
import sys
import time

import torch

import hora.torch as hvd

outdir, steps = sys.argv[1], int(sys.argv[2])
kill = grow = None
step_time = 0.0
for i, arg in enumerate(sys.argv):
    if arg == "--step-time":
        step_time = float(sys.argv[i + 1])
    if arg == "--kill":
        kill = sys.argv[i + 1].rsplit("@", 1)
    if arg == "--grow":
        path, rest = sys.argv[i + 1].rsplit("@", 1)
        step, line = rest.split(":", 1)
        grow = (path, int(step), line)

DIM = 4
worker = os.environ["HORA_WORKER_ID"]


def sample(t, r):
    g = torch.Generator().manual_seed(1000 * t + r)
    x = torch.randn(DIM, generator=g, dtype=torch.float64)
    return x, x.sum() * 0.5


hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(DIM, 1, bias=False).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
state = hvd.elastic.TorchState(model, optimizer, step=0)
rounds = []


@hvd.elastic.run
def train(state):
    rounds.append({"round": hvd.elastic.current_round(), "size": hvd.size(), "rank": hvd.rank(),
                   "from_step": state.step, "at": time.time()})
    while state.step < steps:
        if kill and worker == kill[0] and state.step == int(kill[1]) and hvd.elastic.current_round() == 0:
            with open(os.path.join(outdir, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = sample(state.step, hvd.rank())
        optimizer.zero_grad()
        loss = (model(x) - y).pow(2).sum()
        loss.backward()
        for p in model.parameters():
            p.grad = hvd.allreduce(p.grad, name="grad", op=hvd.Average)
        optimizer.step()
        time.sleep(step_time)
        state.step += 1
        state.commit()
        if grow and hvd.rank() == 0 and state.step == grow[1]:
            with open(os.path.join(outdir, "grown_at"), "w") as f:
                f.write(repr(time.time()))
            with open(grow[0], "a") as f:
                f.write(grow[2] + "\n")


train(state)
with open(os.path.join(outdir, worker + ".json"), "w") as f:
    json.dump({"weights": model.weight.detach().flatten().tolist(), "rounds": rounds}, f)
