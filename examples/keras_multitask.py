"""Two Keras tasks side by side in one job, each on its own process set.

The even ranks train a classifier on two interleaved spirals; the odd ranks
train a regression model on a sine wave. Each task is a plain Keras
model.fit, data-parallel over its set through
hora.tensorflow.keras.DistributedOptimizer(process_set=...): its gradients
are averaged over its own ranks only, and neither task waits for the other.
Writes keras_multitask.png with both learning curves. Run from the
repository root, after `make demo` (--steps, or HORA_EXAMPLE_STEPS,
shortens it; model.fit runs whole epochs, so the steps are rounded up to
the next whole epoch, and the script says so):

    .venv/bin/horarun -np 4 .venv/bin/python examples/keras_multitask.py
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hora.tensorflow as htf  # noqa: E402
import hora.tensorflow.keras as hvd  # noqa: E402
from plots import curves_figure, save  # noqa: E402


def options():
    steps = int(os.environ.get("HORA_EXAMPLE_STEPS", 200))
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, default=steps, help=f"training steps per task, rounded up to whole epochs (default {steps})")
    parser.add_argument("--batch", type=int, default=64, help="batch size per rank")
    parser.add_argument("--out", default="keras_multitask.png", help="where to write the PNG")
    return parser.parse_args()


def spirals(rng, rows, turns=1.5):
    label = rng.integers(0, 2, rows)
    t = rng.random(rows) * turns * 2 * np.pi + 0.5
    angle = t + np.pi * label
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], 1) / (turns * 2 * np.pi)
    return (x + 0.015 * rng.standard_normal((rows, 2))).astype("float32"), label.astype("int32")


def waves(rng, rows):
    x = rng.random((rows, 1)) * 2 - 1
    return x.astype("float32"), (np.sin(3 * x) + 0.05 * rng.standard_normal((rows, 1))).astype("float32")


class Progress(keras.callbacks.Callback):
    """Records the set's average loss per step; the set's first rank prints it."""

    def __init__(self, task, process_set, every):
        super().__init__()
        self.task, self.process_set, self.every = task, process_set, every
        self.curve = []

    def on_epoch_end(self, epoch, logs=None):  # logs are averaged over the set already
        step = (epoch + 1) * self.params["steps"]
        self.curve.append((step, logs["loss"]))
        if self.process_set.rank() == 0 and ((epoch + 1) % self.every == 0 or epoch == 0):
            shown = ", ".join(f"{name} {value:.4f}" for name, value in logs.items() if name != "lr")
            print(f"[{self.task}] step {step}: {shown}", flush=True)


args = options()
hvd.init()
even = hvd.ProcessSet(range(0, hvd.size(), 2))
odd = hvd.ProcessSet(range(1, hvd.size(), 2))
my_set = even if even.included() else odd
rng = np.random.default_rng(0 if my_set is even else 1)
if my_set is even:
    task, (x, y) = "spirals classifier", spirals(rng, 2048)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
    loss, metrics = keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"]
else:
    task, (x, y) = "sine regression", waves(rng, 2048)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(32, activation="tanh"),
                              keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    loss, metrics = "mse", ["mae"]
shard = slice(my_set.rank() * len(x) // my_set.size(), (my_set.rank() + 1) * len(x) // my_set.size())
x, y = x[shard], y[shard]

steps_per_epoch = max(1, len(x) // args.batch)
epochs = max(1, -(-args.steps // steps_per_epoch))   # whole epochs, at least --steps
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), process_set=my_set), loss=loss,
              metrics=metrics)
progress = Progress(task, my_set, every=max(1, epochs // 5))
if my_set.rank() == 0:
    rounded = "" if epochs * steps_per_epoch == args.steps else (
        f" (--steps {args.steps} rounded up to {epochs} whole epochs of {steps_per_epoch} batches)")
    print(f"[{task}] training on ranks {my_set.ranks}, {len(x)} examples per rank, "
          f"{epochs * steps_per_epoch} steps{rounded}", flush=True)
start = time.perf_counter()
history = model.fit(x, y, batch_size=args.batch, epochs=epochs, shuffle=False, verbose=0, callbacks=[
    hvd.callbacks.BroadcastGlobalVariablesCallback(my_set.ranks[0], process_set=my_set),
    hvd.callbacks.MetricAverageCallback(process_set=my_set), progress])
elapsed = time.perf_counter() - start
steps = epochs * steps_per_epoch
final = ", ".join(f"{name} {values[-1]:.4f}" for name, values in history.history.items())
if my_set.rank() == 0:
    print(f"[{task}] final: {final}, {steps / elapsed:.1f} steps/s", flush=True)

results = {}
for part in htf.allgather_object({f"{task} (ranks {my_set.ranks})": (progress.curve, f"{task} {final}")}
                                 if my_set.rank() == 0 else {}):
    results.update(part)
if hvd.rank() == 0:
    curves = {label: curve for label, (curve, _) in results.items()}
    outcome = "; ".join(sorted(text for _, text in results.values()))
    title = (f"Two Keras tasks side by side on {hvd.size()} ranks, each on its own process set\n"
             f"after {steps} steps: {outcome}")
    save(curves_figure(curves, title, ylabel="training loss (spirals: cross-entropy, sine: MSE)"), args.out)
hvd.shutdown()
