"""An A/B test: two training recipes on identical data, side by side.

Arm A (the even ranks) trains with SGD and momentum, arm B (the odd ranks)
with Adam; same model, same initial weights, same data. Each arm is
data-parallel over its own process set. At the end both arms are scored on
the same test set and the difference of their mean squared errors is
reported with its standard error (paired over test examples); ab_test.png
shows both arms' training curves and the outcome. Run from the repository
root, after `make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/ab_test.py
"""

import math

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report, shard, waves
from plots import curves_figure, save

args = parser(describe(__doc__), steps=200, out="ab_test.png").parse_args()
hvd.init()
torch.set_num_threads(1)
arm_a = hvd.ProcessSet(range(0, hvd.size(), 2))
arm_b = hvd.ProcessSet(range(1, hvd.size(), 2))
my_set = arm_a if arm_a.included() else arm_b
arm = "A: SGD + momentum" if my_set is arm_a else "B: Adam"

x, y = shard(waves(seed=0, rows=1024, frequency=5.0), my_set)
test_x, test_y = waves(seed=1, rows=1000, frequency=5.0)
torch.manual_seed(0)  # both arms start from the same weights
model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 1))
base = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if my_set is arm_a
        else torch.optim.Adam(model.parameters(), lr=0.01))
optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(), process_set=my_set)
report(arm, my_set, f"training on ranks {my_set.ranks}")

curve = []
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 10 == 0 or step == args.steps:
        train_loss = hvd.allreduce(loss.detach(), name="train_loss", process_set=my_set).item()
        curve.append((step, train_loss))
        if step % 50 == 0:
            report(arm, my_set, f"step {step}: train MSE {train_loss:.4f}")

# Score both arms on the same test examples; the first rank of each arm sends its errors.
with torch.no_grad():
    errors = ((model(test_x) - test_y) ** 2).squeeze(1)
report(arm, my_set, f"final: test MSE {errors.mean().item():.4f}")
scores = hvd.allgather_object((my_set is arm_a, errors) if my_set.rank() == 0 else None, name="scores")
curves = gather({f"arm {arm} (ranks {my_set.ranks})": curve} if my_set.rank() == 0 else {})
if hvd.rank() == 0:
    by_arm = {is_a: e for is_a, e in (s for s in scores if s is not None)}
    difference = by_arm[False] - by_arm[True]  # B - A, per test example
    mean, error = difference.mean().item(), difference.std().item() / math.sqrt(len(difference))
    outcome = (f"test MSE: A {by_arm[True].mean().item():.4f}, B {by_arm[False].mean().item():.4f}; "
               f"B - A = {mean:+.4f} ± {error:.4f} standard error (z = {mean / error:+.1f})")
    print(outcome)
    verdict = ("no significant difference between the arms" if abs(mean) < 2 * error
               else f"winner: arm {'A' if mean > 0 else 'B'}")
    print(verdict, flush=True)
    # The curves are training MSE; the outcome is test MSE on held-out examples,
    # its standard error over those examples (paired: both arms score the same
    # ones), so run-to-run noise of the seeds is not in it.
    save(curves_figure(curves, f"A/B test, same model and data: A (SGD + momentum) vs B (Adam)\n"
                               f"{verdict}; {outcome}\n"
                               f"curves: training MSE; outcome: test MSE on {len(difference)} held-out "
                               "examples (± paired standard error)",
                       ylabel="training MSE"), args.out)
hvd.shutdown()
