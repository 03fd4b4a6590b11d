"""An ensemble trained on Ray: one RayExecutor, each member on its own
process set.

The executor starts --num-workers actors (a local Ray instance here;
`ray.init(address=...)` joins a cluster instead) and runs one function on
all of them. Inside it the ranks are split into sets of --ranks-per-member;
each set trains one member (its own seed and bootstrap sample, data-parallel
within the set). The members then vote over the whole job: their predicted
probabilities on a common test set are averaged, and the driver compares
the ensemble's accuracy with each member's in ray_ensemble.png. Run from the
repository root, after `make demo` (--steps, or HORA_EXAMPLE_STEPS, shortens
it):

    .venv/bin/python examples/ray_ensemble.py
"""

import time

import ray
import ray.cloudpickle

import learning_curves
from hora.ray import RayExecutor
from learning_curves import describe, parser
from plots import ensemble_figure, save

# The actors cannot import the examples' helpers: they travel with the
# function (Ray sends functions with its own cloudpickle).
ray.cloudpickle.register_pickle_by_value(learning_curves)


def train_member(ranks_per_member, steps):
    """Runs on every rank: trains this rank's member, then votes. Returns
    (member label, its curve and accuracy) from a set's first rank, and the
    ensemble's accuracy from every rank."""
    import torch
    import torch.nn.functional as F

    import hora.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    k = ranks_per_member
    members = hvd.size() // k
    member = hvd.rank() // k
    my_set = hvd.ProcessSet(range(member * k, (member + 1) * k))
    x, y = learning_curves.spirals(seed=0, rows=256, noise=1.0)
    bootstrap = torch.randint(0, len(x), (len(x),), generator=torch.Generator().manual_seed(100 + member))
    x, y = learning_curves.shard((x[bootstrap], y[bootstrap]), my_set)
    test_x, test_y = learning_curves.spirals(seed=1, rows=2000, noise=1.0)

    torch.manual_seed(member)
    model = torch.nn.Sequential(torch.nn.Linear(2, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 2))
    hvd.broadcast_parameters(model.state_dict(), root_rank=my_set.ranks[0], process_set=my_set)
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), process_set=my_set)
    curve = []
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step % 10 == 0 or step == steps:
            with torch.no_grad():
                curve.append((step, F.cross_entropy(model(test_x), test_y).item()))
    with torch.no_grad():
        probabilities = F.softmax(model(test_x), 1)
    accuracy = (probabilities.argmax(1) == test_y).float().mean().item()
    # The vote: every member's probabilities, averaged over the job (each member once).
    mine = probabilities if my_set.rank() == 0 else torch.zeros_like(probabilities)
    vote = hvd.allreduce(mine, op=hvd.Sum, name="vote") / members
    ensemble_accuracy = (vote.argmax(1) == test_y).float().mean().item()
    label = f"member {member} (ranks {my_set.ranks})"
    mine = (label, {"curve": curve, "accuracy": accuracy}) if my_set.rank() == 0 else None
    hvd.shutdown()
    return mine, ensemble_accuracy


def main():
    options = parser(describe(__doc__), steps=150, out="ray_ensemble.png")
    options.add_argument("--ranks-per-member", type=int, default=2)
    options.add_argument("--num-workers", type=int, default=4, help="Ray actors, each a rank")
    args = options.parse_args()
    if args.ranks_per_member <= 0 or args.num_workers % args.ranks_per_member:
        options.error(f"--ranks-per-member {args.ranks_per_member} must divide --num-workers {args.num_workers}")

    ray.init(num_cpus=args.num_workers, include_dashboard=False)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.num_workers)
    start = time.perf_counter()
    executor.start()
    try:
        per_rank = executor.run(train_member, args=(args.ranks_per_member, args.steps))
    finally:
        executor.shutdown()
    elapsed = time.perf_counter() - start
    ray.shutdown()

    members = dict(result for result, _ in per_rank if result is not None)
    ensemble_accuracy = per_rank[0][1]
    accuracies = [member["accuracy"] for member in members.values()]
    print(f"{len(members)} members on {args.num_workers} Ray actors in {elapsed:.1f} s")
    for label, member in members.items():
        print(f"  {label}: test accuracy {member['accuracy']:.4f}")
    print(f"members' test accuracy: mean {sum(accuracies) / len(accuracies):.4f}")
    print(f"ensemble of {len(members)} members: test accuracy {ensemble_accuracy:.4f}", flush=True)
    save(ensemble_figure(members, ensemble_accuracy), args.out)


if __name__ == "__main__":
    main()
