"""Two tasks side by side in one job, each on its own process set.

The even ranks train a classifier on two interleaved spirals; the odd ranks
train a regression model on a sine wave. Each task is data-parallel over its
set (DistributedOptimizer(process_set=...)): its gradients are averaged over
its own ranks only, and neither task ever waits for the other. Writes
multitask.png with both learning curves. Run from the repository root, after
`make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/multitask.py
"""

import time

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report, shard, spirals, waves
from plots import curves_figure, save

args = parser(describe(__doc__), steps=300, out="multitask.png").parse_args()
hvd.init()
torch.set_num_threads(1)
even = hvd.ProcessSet(range(0, hvd.size(), 2))
odd = hvd.ProcessSet(range(1, hvd.size(), 2))
my_set = even if even.included() else odd

if my_set is even:
    task = "spirals classifier"
    x, y = shard(spirals(seed=0, rows=1024), my_set)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 2))

    def evaluate(model, x, y):
        logits = model(x)
        return F.cross_entropy(logits, y), {"accuracy": (logits.argmax(1) == y).float().mean()}
else:
    task = "sine regression"
    x, y = shard(waves(seed=1, rows=1024), my_set)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))

    def evaluate(model, x, y):
        mse = F.mse_loss(model(x), y)
        return mse, {"rmse": mse.sqrt()}

hvd.broadcast_parameters(model.state_dict(), root_rank=my_set.ranks[0], process_set=my_set)
optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), process_set=my_set)
report(task, my_set, f"training on ranks {my_set.ranks}, {len(x)} examples per rank")

curve = []
start = time.perf_counter()
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    loss, metrics = evaluate(model, x, y)
    loss.backward()
    optimizer.step()
    if step % 10 == 0 or step == 1 or step == args.steps:
        # The task's loss and metrics averaged over its own set.
        values = hvd.allreduce(torch.stack([loss.detach()] + [m.detach() for m in metrics.values()]),
                               name="metrics", process_set=my_set)
        curve.append((step, values[0].item()))
        if step % 50 == 0 or step == args.steps:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in zip(metrics, values[1:].tolist()))
            report(task, my_set, f"step {step}: loss {values[0].item():.4f}, {shown}")

elapsed = time.perf_counter() - start
final = f"loss {curve[-1][1]:.4f}, {shown}"
report(task, my_set, f"final: {final}, {args.steps / elapsed:.0f} steps/s")
results = gather({f"{task} (ranks {my_set.ranks})": (curve, f"{task} {final}")} if my_set.rank() == 0 else {})
if hvd.rank() == 0:
    curves = {label: curve for label, (curve, _) in results.items()}
    outcome = "; ".join(sorted(final for _, final in results.values()))
    title = (f"Two tasks side by side on {hvd.size()} ranks, each on its own process set\n"
             f"after {args.steps} steps: {outcome}")
    save(curves_figure(curves, title, ylabel="training loss (spirals: cross-entropy, sine: MSE)"), args.out)
hvd.shutdown()
