"""What the PyTorch examples share: command-line options, synthetic data sets,
progress lines and gathering every set's results. Their figures are
made in plots.py."""

import argparse
import os

import torch

import hora.torch as hvd

# Sets the default of every example's --steps: a quick run of all of them
# (the tests use it) without changing their command lines.
STEPS_VARIABLE = "HORA_EXAMPLE_STEPS"


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def parser(description, steps, out):
    """An argument parser with --steps (default ``steps``, or
    $HORA_EXAMPLE_STEPS when set) and --out (where the PNG goes); examples
    add their own options to it."""
    default_steps = steps
    options = argparse.ArgumentParser(description=description)
    if STEPS_VARIABLE in os.environ:
        try:
            default_steps = _positive_int(os.environ[STEPS_VARIABLE])
        except argparse.ArgumentTypeError as error:
            options.error(f"{STEPS_VARIABLE} {error}")
    options.add_argument("--steps", type=_positive_int, default=default_steps,
                         help=f"training steps per task (default {steps}, or ${STEPS_VARIABLE})")
    options.add_argument("--out", default=out, help="where to write the PNG (default %(default)s)")
    return options


def describe(docstring):
    """An example's description: the first paragraph of its docstring."""
    return " ".join(docstring.split("\n\n")[0].split())


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


def gather(results):
    """Every set's results on every rank: ``results`` maps a task's label to
    what it reports, and holds only the tasks this rank reports (its set's
    first rank reports them); the union of all ranks' is returned."""
    merged = {}
    for part in hvd.allgather_object(results, name="example_results"):
        merged.update(part)
    return merged
