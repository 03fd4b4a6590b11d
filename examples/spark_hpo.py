"""Hyper-parameter search on Spark: a learning-rate search in one
hora.spark.run job, each trial on its own process set.

The job runs on --num-proc Spark tasks (a local[4] session here; any
cluster with that many task slots works the same). Inside it the ranks are
split into sets of --ranks-per-trial; each set trains its share of the
trials one after the other, data-parallel within the set, while the other
sets train theirs. Every rank returns what its set measured; the driver
reports the best learning rate and writes spark_hpo.png with every trial's
validation curve. Run from the repository root, after `make demo` (--steps,
or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/python examples/spark_hpo.py
"""

import math
import os
import sys
import time

import cloudpickle

import hora.spark
import learning_curves
from learning_curves import describe, parser
from plots import best, diverged, hpo_figure, save

# The Spark tasks cannot import the examples' helpers: they travel with the function.
cloudpickle.register_pickle_by_value(learning_curves)


def search(trials, ranks_per_trial, steps):
    """Runs on every rank: this rank's set trains its trials; returns
    {trial: (curve, the set's ranks)} from the set's first rank, {} from the others."""
    import torch
    import torch.nn.functional as F

    import hora.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    k = ranks_per_trial
    sets = [hvd.ProcessSet(range(i * k, (i + 1) * k)) for i in range(hvd.size() // k)]
    my_index = hvd.rank() // k
    my_set = sets[my_index]
    x, y = learning_curves.shard(learning_curves.waves(seed=0, rows=1024), my_set)
    val_x, val_y = learning_curves.shard(learning_curves.waves(seed=1, rows=512), my_set)
    results = {}
    for trial in range(my_index, trials, len(sets)):
        lr = 0.8 * 0.25 ** trial   # 0.8, 0.2, 0.05, ...
        torch.manual_seed(trial)   # every member starts from the same weights
        model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                    torch.nn.Tanh(), torch.nn.Linear(32, 1))
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                             named_parameters=model.named_parameters(), process_set=my_set)
        curve = []
        for step in range(1, steps + 1):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            if step % 10 == 0 or step == steps:
                with torch.no_grad():
                    val_loss = hvd.allreduce(F.mse_loss(model(val_x), val_y), process_set=my_set).item()
                curve.append((step, val_loss if math.isfinite(val_loss) else math.inf))
        if my_set.rank() == 0:
            print(f"trial {trial} lr={lr:.4g} on ranks {my_set.ranks}: validation MSE {curve[-1][1]:.4f}",
                  flush=True)
            results[trial] = (curve, my_set.ranks)
    hvd.shutdown()
    return results


def main():
    options = parser(describe(__doc__), steps=150, out="spark_hpo.png")
    options.add_argument("--trials", type=int, default=4, help="number of learning rates to try")
    options.add_argument("--ranks-per-trial", type=int, default=2)
    options.add_argument("--num-proc", type=int, default=4, help="Spark tasks, each a rank")
    args = options.parse_args()
    if args.ranks_per_trial <= 0 or args.num_proc % args.ranks_per_trial:
        options.error(f"--ranks-per-trial {args.ranks_per_trial} must divide --num-proc {args.num_proc}")

    from pyspark.sql import SparkSession

    # The tasks run this interpreter, which has hora installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(f"local[{args.num_proc}]").appName("hora spark_hpo")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    start = time.perf_counter()
    per_rank = hora.spark.run(search, args=(args.trials, args.ranks_per_trial, args.steps), num_proc=args.num_proc)
    elapsed = time.perf_counter() - start
    spark.stop()

    trials = {}
    for part in per_rank:
        trials.update(part)
    curves = {}
    print(f"{len(trials)} trials on {args.num_proc // args.ranks_per_trial} sets of {args.ranks_per_trial} "
          f"ranks in one Spark job, {elapsed:.1f} s:")
    for trial, (curve, ranks) in sorted(trials.items()):
        label = f"trial {trial} lr={0.8 * 0.25 ** trial:.4g}"
        curves[label] = curve
        outcome = "diverged" if diverged(curve) else f"validation MSE {curve[-1][1]:.4f}"
        print(f"  {label:<22} ranks {ranks}: {outcome}")
    winner = best(curves)
    if winner is None:
        print("best: none, every trial diverged", flush=True)
    else:
        print(f"best: {winner}, validation MSE {curves[winner][-1][1]:.4f}", flush=True)
    save(hpo_figure(curves, f"Learning-rate search on Spark (hora.spark.run, sets of {args.ranks_per_trial} "
                            "ranks)"), args.out)


if __name__ == "__main__":
    main()
