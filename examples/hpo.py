"""Hyper-parameter search: trials with different learning rates, each on its
own process set of equal size, all in one job.

Run with:  horarun -np 4 python examples/hpo.py

The ranks are split into sets of --ranks-per-trial; each set runs its share
of the trials one after the other (data-parallel within the set), and sets
run at the same time without waiting for each other. At the end every trial's
validation loss is gathered and the best learning rate is reported.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import gather_curves, plot, report, shard, waves

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150, help="training steps per trial")
parser.add_argument("--trials", type=int, default=4, help="number of learning rates to try")
parser.add_argument("--ranks-per-trial", type=int, default=2)
parser.add_argument("--out", default="hpo.png")
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)
k = args.ranks_per_trial
if hvd.size() % k:
    raise SystemExit(f"--ranks-per-trial {k} must divide the number of ranks {hvd.size()}")
sets = [hvd.ProcessSet(range(i * k, (i + 1) * k)) for i in range(hvd.size() // k)]
my_index = hvd.rank() // k
my_set = sets[my_index]
learning_rates = [0.8 * 0.25 ** i for i in range(args.trials)]  # 0.8, 0.2, 0.05, ...

x, y = shard(waves(seed=0, rows=1024), my_set)
val_x, val_y = shard(waves(seed=1, rows=512), my_set)


def run_trial(trial, lr):
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
        if step % 10 == 0:
            with torch.no_grad():
                val_loss = hvd.allreduce(F.mse_loss(model(val_x), val_y), name="validation", process_set=my_set)
            val_loss = val_loss.item() if math.isfinite(val_loss.item()) else math.inf  # diverged
            if math.isfinite(val_loss):
                curve.append((step, val_loss))
            if step % 50 == 0:
                report(label, my_set, f"step {step}: validation MSE {val_loss:.4f}")
    return label, curve, val_loss


start = time.perf_counter()
results, curves = [], {}
for trial in range(my_index, args.trials, len(sets)):
    label, curve, val_loss = run_trial(trial, learning_rates[trial])
    if my_set.rank() == 0:
        if curve:
            curves[label] = curve
        results.append((val_loss, trial, learning_rates[trial], my_set.ranks))

everything = sorted(r for part in hvd.allgather_object(results, name="results") for r in part)
if hvd.rank() == 0:
    print(f"{len(everything)} trials on {len(sets)} sets of {k} ranks in {time.perf_counter() - start:.1f} s:")
    for val_loss, trial, lr, ranks in everything:
        outcome = f"validation MSE {val_loss:.4f}" if math.isfinite(val_loss) else "diverged"
        print(f"  trial {trial} lr={lr:<8.4g} ranks {ranks}: {outcome}")
    val_loss, trial, lr, _ = everything[0]
    print(f"best trial: {trial}, lr={lr:.4g}, validation MSE {val_loss:.4f}", flush=True)
plot(gather_curves(curves), args.out, "Learning-rate search: validation MSE per trial", ylabel="validation MSE")
hvd.shutdown()
