"""Two tasks in one elastic job (tests/python/test_elastic.py): a model on
the even ranks and one on the odd ranks, each with its own TorchState
bound to its ElasticProcessSet, run by ``horarun --min-np ...``:

    elastic_tasks.py OUTDIR STEPS [--kill WORKER@STEP]

At step t, set rank r of a task of n members uses sample(task, t, r); the
gradients are averaged over the task's set, and each task commits after
every step. --kill makes WORKER SIGKILL itself before its task's step STEP
in the first round. Each worker writes OUTDIR/<worker>.json: its task, the
final weights, and per round the world size, its set and the step its task
(re)started from.
"""

import json
import os
import signal
import sys
import time

import torch

import hora.torch as hvd

outdir, steps = sys.argv[1], int(sys.argv[2])
kill = sys.argv[sys.argv.index("--kill") + 1].rsplit("@", 1) if "--kill" in sys.argv else None
DIM = 4
worker = os.environ["HORA_WORKER_ID"]
even = hvd.elastic.ElasticProcessSet(lambda size: range(0, size, 2), name="even")
odd = hvd.elastic.ElasticProcessSet(lambda size: range(1, size, 2), name="odd")


def sample(task, t, r):
    g = torch.Generator().manual_seed(100000 * task + 1000 * t + r)
    x = torch.randn(DIM, generator=g, dtype=torch.float64)
    return x, x.sum() * (0.5 if task == 0 else -0.25)


hvd.init()
task = 0 if even.included() else 1
my_set = (even, odd)[task]
torch.manual_seed(task)
model = torch.nn.Linear(DIM, 1, bias=False).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
state = hvd.elastic.TorchState(model, optimizer, process_set=my_set, step=0)
rounds = []


@hvd.elastic.run
def train(state):
    rounds.append({"round": hvd.elastic.current_round(), "size": hvd.size(), "set": my_set.ranks,
                   "from_step": state.step})
    while state.step < steps:
        if kill and worker == kill[0] and state.step == int(kill[1]) and hvd.elastic.current_round() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = sample(task, state.step, my_set.rank())
        optimizer.zero_grad()
        (model(x) - y).pow(2).sum().backward()
        for p in model.parameters():
            p.grad = hvd.allreduce(p.grad, name=f"grad.{task}", op=hvd.Average, process_set=my_set.process_set)
        optimizer.step()
        time.sleep(0.05)
        state.step += 1
        state.commit()


train(state)
with open(os.path.join(outdir, worker + ".json"), "w") as f:
    json.dump({"task": task, "weights": model.weight.detach().flatten().tolist(), "rounds": rounds}, f)
