"""What the examples share: command-line options, synthetic data sets and a
PNG of every task's learning curves."""

import argparse

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import hora.torch as hvd  # noqa: E402


def options(description, steps, out):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="training steps per task")
    parser.add_argument("--out", default=out, help="where to write the PNG of the learning curves")
    return parser.parse_args()


def spirals(seed, rows, turns=1.5, noise=0.15):
    """Two interleaved spirals: features (rows, 2), labels (rows,) in {0, 1}."""
    g = torch.Generator().manual_seed(seed)
    label = torch.randint(0, 2, (rows,), generator=g)
    t = torch.rand(rows, generator=g) * turns * 2 * torch.pi + 0.5
    angle = t + torch.pi * label
    x = torch.stack([t * torch.cos(angle), t * torch.sin(angle)], 1) / (turns * 2 * torch.pi)
    return x + noise * 0.1 * torch.randn(rows, 2, generator=g), label


def waves(seed, rows, frequency=3.0, phase=0.0, noise=0.05):
    """A 1-d regression target: y = sin(frequency * x + phase) + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, 1, generator=g) * 2 - 1
    return x, torch.sin(frequency * x + phase) + noise * torch.randn(rows, 1, generator=g)


def shard(tensors, process_set):
    """This member's equal share of each tensor (rows split over the set)."""
    n, i = process_set.size(), process_set.rank()
    return [t.chunk(n)[i] for t in tensors]


def report(task, process_set, text):
    """Prints a line for ``task`` from the set's first rank only."""
    if process_set.rank() == 0:
        print(f"[{task}] {text}", flush=True)


def gather_curves(curves):
    """Every task's curves on every rank: ``curves`` maps a label to a list of
    (step, value) and holds only the tasks this rank reports."""
    merged = {}
    for part in hvd.allgather_object(curves, name="learning_curves"):
        merged.update(part)
    return merged


def plot(curves, path, title, ylabel="loss", log=True):
    """Writes the curves (label -> [(step, value)]) as a PNG; rank 0 only."""
    if hvd.rank() != 0:
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, points in sorted(curves.items()):
        steps, values = zip(*points)
        axes.plot(steps, values, label=label)
    if log:
        axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    print(f"learning curves written to {path}", flush=True)
