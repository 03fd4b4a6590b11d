"""Hyper-parameter search in TensorFlow: trials with different learning rates,
each on its own process set, with a custom training loop.

The ranks are split into sets of --ranks-per-trial; each set runs its share
of the trials one after the other, data-parallel within the set: a
tf.function step whose hora.tensorflow.DistributedGradientTape averages the
gradients over the trial's set only. Sets run at the same time without
waiting for each other. At the end every trial's validation loss is
gathered, the best learning rate is reported, and tf_hpo.png shows every
trial's curve. Run from the repository root, after `make demo` (--steps,
or HORA_EXAMPLE_STEPS, shortens it):

    .venv/bin/horarun -np 4 .venv/bin/python examples/tf_hpo.py
"""

import argparse
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hora.tensorflow as hvd  # noqa: E402
from plots import best, diverged, hpo_figure, save  # noqa: E402


def options():
    steps = int(os.environ.get("HORA_EXAMPLE_STEPS", 150))
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, default=steps, help=f"training steps per trial (default {steps})")
    parser.add_argument("--trials", type=int, default=4, help="number of learning rates to try")
    parser.add_argument("--ranks-per-trial", type=int, default=2)
    parser.add_argument("--out", default="tf_hpo.png", help="where to write the PNG")
    return parser.parse_args()


def waves(seed, rows):
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 1)) * 2 - 1
    return x.astype("float32"), (np.sin(3 * x) + 0.05 * rng.standard_normal((rows, 1))).astype("float32")


def shard(arrays, process_set):
    n, i = process_set.size(), process_set.rank()
    return [a[i * len(a) // n:(i + 1) * len(a) // n] for a in arrays]


class Model(tf.Module):
    """A small tanh network, the same start on every member of a trial."""

    def __init__(self, seed):
        super().__init__()
        init = tf.random.Generator.from_seed(seed)
        sizes = [(1, 32), (32, 32), (32, 1)]
        self.weights = [tf.Variable(init.normal(shape) / math.sqrt(shape[0])) for shape in sizes]
        self.biases = [tf.Variable(tf.zeros([shape[1]])) for shape in sizes]

    def __call__(self, x):
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            x = tf.tanh(x) if i < len(self.weights) - 1 else x
        return x


def run_trial(trial, lr, my_set, data, steps):
    """Trains one trial on ``my_set``; returns its validation curve (inf
    where the loss is not finite)."""
    (x, y), (val_x, val_y) = data
    model = Model(seed=trial)
    variables = model.trainable_variables
    velocities = [tf.Variable(tf.zeros_like(v)) for v in variables]

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        tape = hvd.DistributedGradientTape(tape, process_set=my_set)
        for v, velocity, g in zip(variables, velocities, tape.gradient(loss, variables)):
            velocity.assign(0.9 * velocity + g)  # SGD with momentum
            v.assign_sub(lr * velocity)
        return loss

    @tf.function
    def validation_loss():
        return hvd.allreduce(tf.reduce_mean(tf.square(model(val_x) - val_y)), process_set=my_set)

    label = f"trial {trial} lr={lr:.4g}"
    if my_set.rank() == 0:
        print(f"[{label}] started on ranks {my_set.ranks}", flush=True)
    curve = []
    for step in range(1, steps + 1):
        train_step()
        if step % 10 == 0 or step == steps:
            value = float(validation_loss())
            curve.append((step, value if math.isfinite(value) else math.inf))
            if step % 50 == 0 and my_set.rank() == 0:
                print(f"[{label}] step {step}: validation MSE {value:.4f}", flush=True)
    return curve


args = options()
hvd.init()
k = args.ranks_per_trial
if k <= 0 or hvd.size() % k:
    raise SystemExit(f"--ranks-per-trial {k} must divide the number of ranks {hvd.size()}")
sets = [hvd.ProcessSet(range(i * k, (i + 1) * k)) for i in range(hvd.size() // k)]
my_index = hvd.rank() // k
my_set = sets[my_index]
learning_rates = [0.8 * 0.25 ** i for i in range(args.trials)]  # 0.8, 0.2, 0.05, ...
data = (shard(waves(0, 1024), my_set), shard(waves(1, 512), my_set))

start = time.perf_counter()
trials = {}
for trial in range(my_index, args.trials, len(sets)):
    curve = run_trial(trial, learning_rates[trial], my_set, data, args.steps)
    if my_set.rank() == 0:
        trials[trial] = (curve, my_set.ranks)

merged = {}
for part in hvd.allgather_object(trials, name="tf_hpo_results"):
    merged.update(part)
if hvd.rank() == 0:
    print(f"{len(merged)} trials on {len(sets)} sets of {k} ranks in {time.perf_counter() - start:.1f} s:")
    curves = {}
    for trial, (curve, ranks) in sorted(merged.items()):
        label = f"trial {trial} lr={learning_rates[trial]:.4g}"
        curves[label] = curve
        outcome = "diverged" if diverged(curve) else f"validation MSE {curve[-1][1]:.4f}"
        print(f"  {label:<22} ranks {ranks}: {outcome}")
    winner = best(curves)
    if winner is None:
        print("best: none, every trial diverged", flush=True)
    else:
        print(f"best: {winner}, validation MSE {curves[winner][-1][1]:.4f}", flush=True)
    save(hpo_figure(curves, f"Learning-rate search (DistributedGradientTape) on sets of {k} ranks"), args.out)
hvd.shutdown()
