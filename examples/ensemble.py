"""An ensemble trained in one job: each member on its own process set.

The ranks are split into sets of --ranks-per-member; each set trains one
member (its own seed and bootstrap sample of the data, data-parallel within
the set). The members then vote: their predicted probabilities on a common
test set are averaged over the whole job, and the ensemble's accuracy is
compared with each member's; ensemble.png shows both. Run from the
repository root, after `make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens
it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/ensemble.py
"""

import torch
import torch.nn.functional as F

import hora.torch as hvd
from learning_curves import describe, gather, parser, report, shard, spirals
from plots import ensemble_figure, save

options = parser(describe(__doc__), steps=150, out="ensemble.png")
options.add_argument("--ranks-per-member", type=int, default=2)
args = options.parse_args()

hvd.init()
torch.set_num_threads(1)
k = args.ranks_per_member
if k <= 0 or hvd.size() % k:
    raise SystemExit(f"--ranks-per-member {k} must divide the number of ranks {hvd.size()}")
members = hvd.size() // k
member = hvd.rank() // k
my_set = hvd.ProcessSet(range(member * k, (member + 1) * k))
task = f"member {member}"

# A noisy problem with little data, where single models overfit differently.
x, y = spirals(seed=0, rows=256, noise=1.0)
bootstrap = torch.randint(0, len(x), (len(x),), generator=torch.Generator().manual_seed(100 + member))
x, y = shard((x[bootstrap], y[bootstrap]), my_set)
test_x, test_y = spirals(seed=1, rows=2000, noise=1.0)

torch.manual_seed(member)
model = torch.nn.Sequential(torch.nn.Linear(2, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 2))
hvd.broadcast_parameters(model.state_dict(), root_rank=my_set.ranks[0], process_set=my_set)
optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), process_set=my_set)
report(task, my_set, f"training on ranks {my_set.ranks}")
curve = []
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 10 == 0 or step == args.steps:
        with torch.no_grad():
            test_loss = F.cross_entropy(model(test_x), test_y).item()
        curve.append((step, test_loss))
        if step % 50 == 0:
            report(task, my_set, f"step {step}: train loss {loss.item():.4f}, test loss {test_loss:.4f}")

with torch.no_grad():
    probabilities = F.softmax(model(test_x), 1)
accuracy = (probabilities.argmax(1) == test_y).float().mean().item()
report(task, my_set, f"final: test accuracy {accuracy:.4f}")
# The vote: every member's probabilities, averaged over the job (each member once).
mine = probabilities if my_set.rank() == 0 else torch.zeros_like(probabilities)
vote = hvd.allreduce(mine, op=hvd.Sum, name="vote") / members
ensemble_accuracy = (vote.argmax(1) == test_y).float().mean().item()
results = gather({f"{task} (ranks {my_set.ranks})": {"curve": curve, "accuracy": accuracy}}
                 if my_set.rank() == 0 else {})
if hvd.rank() == 0:
    accuracies = [result["accuracy"] for result in results.values()]
    print(f"members' test accuracy: {', '.join(f'{a:.4f}' for a in accuracies)} "
          f"(mean {sum(accuracies) / len(accuracies):.4f})")
    print(f"ensemble of {members} members: test accuracy {ensemble_accuracy:.4f}", flush=True)
    save(ensemble_figure(results, ensemble_accuracy), args.out)
hvd.shutdown()
