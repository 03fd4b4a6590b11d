"""Hyper-parameter search: trials with different learning rates, each on its
own process set of equal size, all in one job.

The ranks are split into sets of --ranks-per-trial; each set runs its share
of the trials one after the other (data-parallel within the set), and sets
run at the same time without waiting for each other. At the end every trial's
validation loss is gathered, the best learning rate is reported, and hpo.png
shows every trial's curve (diverged trials marked, the best one highlighted).
Run from the repository root, after `make demo` (--steps, or
HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/hpo.py
"""

import math
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report, shard, waves
from plots import best, diverged, hpo_figure, save

options = parser(describe(__doc__), steps=150, out="hpo.png")
options.add_argument("--trials", type=int, default=4, help="number of learning rates to try")
options.add_argument("--ranks-per-trial", type=int, default=2)
args = options.parse_args()

hvd.init()
torch.set_num_threads(1)
k = args.ranks_per_trial
if k <= 0 or hvd.size() % k:
    raise SystemExit(f"--ranks-per-trial {k} must divide the number of ranks {hvd.size()}")
sets = [hvd.ProcessSet(range(i * k, (i + 1) * k)) for i in range(hvd.size() // k)]
my_index = hvd.rank() // k
my_set = sets[my_index]
learning_rates = [0.8 * 0.25 ** i for i in range(args.trials)]  # 0.8, 0.2, 0.05, ...

x, y = shard(waves(seed=0, rows=1024), my_set)
val_x, val_y = shard(waves(seed=1, rows=512), my_set)


def run_trial(trial, lr):
    """Trains one trial on my_set; returns its validation curve (inf where
    the loss is not finite)."""
    torch.manual_seed(trial)  # every member starts from the same weights
    model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                         named_parameters=model.named_parameters(), process_set=my_set)
    label = f"trial {trial} lr={lr:.4g}"
    report(label, my_set, f"started on ranks {my_set.ranks}")
    curve = []
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps:
            with torch.no_grad():
                val_loss = hvd.allreduce(F.mse_loss(model(val_x), val_y), name="validation", process_set=my_set)
            val_loss = val_loss.item() if math.isfinite(val_loss.item()) else math.inf
            curve.append((step, val_loss))
            if step % 50 == 0:
                report(label, my_set, f"step {step}: validation MSE {val_loss:.4f}")
    return curve


start = time.perf_counter()
trials = {}
for trial in range(my_index, args.trials, len(sets)):
    curve = run_trial(trial, learning_rates[trial])
    if my_set.rank() == 0:
        trials[trial] = (curve, my_set.ranks)

trials = dict(sorted(gather(trials).items()))
if hvd.rank() == 0:
    print(f"{len(trials)} trials on {len(sets)} sets of {k} ranks in {time.perf_counter() - start:.1f} s:")
    curves = {}
    for trial, (curve, ranks) in trials.items():
        label = f"trial {trial} lr={learning_rates[trial]:.4g}"
        curves[label] = curve
        outcome = "diverged" if diverged(curve) else f"validation MSE {curve[-1][1]:.4f}"
        print(f"  {label:<22} ranks {ranks}: {outcome}")
    winner = best(curves)
    if winner is None:
        print("best: none, every trial diverged", flush=True)
    else:
        print(f"best: {winner}, validation MSE {curves[winner][-1][1]:.4f}", flush=True)
    save(hpo_figure(curves, f"Learning-rate search (SGD with momentum) on sets of {k} ranks"), args.out)
hvd.shutdown()
