"""Two tasks in one elastic job: they keep training while a worker is lost
and comes back.

The even ranks train a classifier on two interleaved spirals, the odd ranks
a regression model on a sine wave, each on a process set given as a
specification (``ElasticProcessSet(lambda size: range(0, size, 2))``) that
is re-made in every rendezvous round, each with its own TorchState bound to
its set. At step --kill-step the worker on slot 3 is killed (SIGKILL): the
odd task, which lost a member, goes back to its last commit; the even task
loses nothing and goes on. After its cooldown the slot's host takes a new
worker, which joins the odd task and receives its state. Writes
elastic_multitask.png: both learning curves, with the points where each
task's world changed. Run from the repository root, after `make demo`
(--steps, or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun --min-np 2 --max-np 4 --host-discovery-script "echo 127.0.0.1:4" --blacklist-cooldown-range 2 3 .venv/bin/python examples/elastic_multitask.py
"""

import os
import signal
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, parser, report, spirals, waves
from plots import color, curves_figure, save

arguments = parser(describe(__doc__), steps=300, out="elastic_multitask.png")
arguments.add_argument("--kill-step", type=int, default=40, help="the step at which slot 3's worker is killed")
arguments.add_argument("--step-time", type=float, default=0.03,
                       help="the least time a step takes, so that the lost slot can return within training")
args = arguments.parse_args()
even = hvd.elastic.ElasticProcessSet(lambda size: range(0, size, 2), name="even")
odd = hvd.elastic.ElasticProcessSet(lambda size: range(1, size, 2), name="odd")
hvd.init()
torch.set_num_threads(1)
my_set = even if even.included() else odd

if my_set is even:
    task, data = "spirals classifier", spirals(seed=0, rows=1024)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))

    def loss_of(model, x, y):
        return F.cross_entropy(model(x), y)
else:
    task, data = "sine regression", waves(seed=1, rows=1024)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def loss_of(model, x, y):
        return F.mse_loss(model(x), y)

optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
state = hvd.elastic.TorchState(model, optimizer, process_set=my_set, step=0, curve=[], changes=[], world=0)


@hvd.elastic.run
def train(state):
    # Entered again after every reset, with the state synchronised.
    if state.world and state.world != my_set.size():
        state.changes.append((state.step, state.world, my_set.size()))
        report(task, my_set.process_set, f"round {hvd.elastic.current_round()}: {my_set.size()} ranks "
                                         f"{my_set.ranks}, going on from step {state.step}")
    state.world = my_set.size()
    x, y = (t[my_set.rank()::my_set.size()] for t in data)   # this member's share of the task's data
    while state.step < args.steps:
        if (os.environ["HORA_WORKER_ID"] == "127.0.0.1:3" and hvd.elastic.current_round() == 0
                and state.step == args.kill_step):
            os.kill(os.getpid(), signal.SIGKILL)
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        for p in model.parameters():
            p.grad = hvd.allreduce(p.grad, name=f"{task}.grad", op=hvd.Average, process_set=my_set.process_set)
        optimizer.step()
        state.step += 1
        if state.step % 10 == 0:
            mean = hvd.allreduce(loss.detach(), name=f"{task}.loss", process_set=my_set.process_set)
            state.curve.append((state.step, mean.item()))
        time.sleep(max(0.0, args.step_time - (time.perf_counter() - started)))
        state.commit()


train(state)
final = f"loss {state.curve[-1][1]:.4f}"
report(task, my_set.process_set, f"final: {final}, world changes at steps {[c[0] for c in state.changes]}")
mine = {task: (state.curve, state.changes, final)} if my_set.rank() == 0 else {}
results = {}
for gathered in hvd.allgather_object(mine, name="results"):
    results.update(gathered)
if hvd.rank() == 0:
    lines = [f"Two tasks in one elastic job, {hvd.size()} workers at the end"]
    for label, (_, changes, final) in sorted(results.items()):
        world = " then ".join(f"{a}->{b} at step {s}" for s, a, b in changes) or "unchanged"
        lines.append(f"{label}: {final}, world {world}")
    figure = curves_figure({label: curve for label, (curve, _, _) in results.items()}, "\n".join(lines),
                           ylabel="training loss (spirals: cross-entropy, sine: MSE)")
    axes = figure.axes[0]
    for index, (label, (curve, changes, _)) in enumerate(sorted(results.items())):
        for step, before, after in changes:
            axes.axvline(step, color=color(index), linestyle=":", linewidth=1)
            axes.annotate(f"{label.split()[0]}: {before}->{after}", (step, 1), xycoords=("data", "axes fraction"),
                          rotation=90, va="top", ha="right", fontsize=8, color=color(index))
    save(figure, args.out)
