"""One base model, several fine-tunes, in one job.

First every rank pretrains a base model together (the global process set) on
a sine wave. Then the ranks split into sets of --ranks-per-finetune and each
set fine-tunes its own copy of the base on a related task (another phase and
amplitude), side by side; next to it, the same set trains the same model from
scratch, to show what the base is worth. finetune.png pairs each fine-tune
with its baseline and says in how many tasks fine-tuning won. Run from the
repository root, after `make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens
it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/finetune.py
"""

import copy

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report, shard, waves
from plots import finetune_figure, save

options = parser(describe(__doc__), steps=150, out="finetune.png")
options.add_argument("--ranks-per-finetune", type=int, default=1)
args = options.parse_args()  # --steps: pretraining steps, and the steps of each fine-tune

hvd.init()
torch.set_num_threads(1)


def new_model():
    return torch.nn.Sequential(torch.nn.Linear(1, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 1))


def train(model, process_set, x, y, lr, label, curve_every=10):
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=lr),
                                         named_parameters=model.named_parameters(), process_set=process_set)
    curve = []
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step % curve_every == 0 or step == args.steps:
            value = hvd.allreduce(loss.detach(), name=f"{label}.loss", process_set=process_set).item()
            curve.append((step, value))
            if step % 50 == 0:
                report(label, process_set, f"step {step}: loss {value:.5f}")
    return curve


# Pretraining on every rank.
everyone = hvd.global_process_set
torch.manual_seed(0)
base = new_model()
hvd.broadcast_parameters(base.state_dict(), root_rank=0)
x, y = shard(waves(seed=0, rows=2048, frequency=4.0), everyone)
base_curve = train(base, everyone, x, y, lr=0.01, label="base")

# Fine-tunes, one per set, side by side.
k = args.ranks_per_finetune
if k <= 0 or hvd.size() % k:
    raise SystemExit(f"--ranks-per-finetune {k} must divide the number of ranks {hvd.size()}")
index = hvd.rank() // k
my_set = hvd.ProcessSet(range(index * k, (index + 1) * k))
phase, amplitude = 0.4 * (index + 1), 1.0 - 0.15 * index
# Few examples of the new task: where a good starting point matters.
x, y = shard(waves(seed=10 + index, rows=32 * k, frequency=4.0, phase=phase), my_set)
y = y * amplitude
test_x, test_y = waves(seed=99, rows=1000, frequency=4.0, phase=phase, noise=0.0)
test_y = test_y * amplitude
label = f"fine-tune {index} (phase {phase:.1f}, amplitude {amplitude:.2f})"
report(label, my_set, f"on ranks {my_set.ranks}")
tuned = copy.deepcopy(base)
tuned_curve = train(tuned, my_set, x, y, lr=0.003, label=label)
torch.manual_seed(1)
scratch = new_model()
scratch_curve = train(scratch, my_set, x, y, lr=0.003, label=f"scratch {index}")
with torch.no_grad():
    tuned_test = F.mse_loss(tuned(test_x), test_y).item()
    scratch_test = F.mse_loss(scratch(test_x), test_y).item()
report(label, my_set, f"final: test MSE {tuned_test:.5f} fine-tuned vs {scratch_test:.5f} from scratch")
task = {"name": f"task {index}", "finetune": tuned_curve, "scratch": scratch_curve,
        "finetune_test": tuned_test, "scratch_test": scratch_test}
tasks = gather({index: task} if my_set.rank() == 0 else {})
if hvd.rank() == 0:
    tasks = [tasks[i] for i in sorted(tasks)]
    won = sum(task["finetune_test"] < task["scratch_test"] for task in tasks)
    print(f"fine-tune beat scratch in {won} of {len(tasks)} tasks (test MSE)", flush=True)
    save(finetune_figure(base_curve, tasks), args.out)
hvd.shutdown()
