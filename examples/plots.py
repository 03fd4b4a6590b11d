"""The examples' figures, built from plain data: no hora, no framework.

Each function returns a matplotlib Figure whose title says, on its first
line, what was compared and, on its second, the result; `save` writes it.
A curve is a list of (step, value) pairs; a value that is not finite
(inf, nan) marks a trial that diverged.
"""

import math

import matplotlib
from matplotlib.figure import Figure

COLORS = matplotlib.colormaps["tab10"].colors
# A curve whose last value is this many times its first has diverged, even
# while its values are still finite.
DIVERGED_GROWTH = 10.0
# The value axis of the search figure ends this many times above the highest
# value of the trials that did not diverge; a diverged trial is drawn up to
# that edge and marked there.
CLIP_HEADROOM = 3.0


def color(index):
    return COLORS[index % len(COLORS)]


def diverged(curve):
    """Whether a curve diverged: a value that is not finite, or a last value
    DIVERGED_GROWTH times its first."""
    values = [value for _, value in curve]
    if not all(math.isfinite(value) for value in values):
        return True
    return len(values) > 1 and values[-1] > DIVERGED_GROWTH * values[0]


def best(trials):
    """The label of the trial with the lowest last value among those that did
    not diverge (``trials``: label -> curve), or None when all diverged."""
    finals = {label: curve[-1][1] for label, curve in trials.items() if curve and not diverged(curve)}
    return min(finals, key=finals.get) if finals else None


def title_of(figure):
    """The figure's title on one line (its two lines joined by ' — ')."""
    return " — ".join(figure.get_suptitle().splitlines())


def save(figure, path):
    """Writes the figure as a PNG and says so, with its title."""
    figure.savefig(path, dpi=100)
    print(f"{path}: {title_of(figure)}", flush=True)


def _new_figure(title, width=9, height=5, **grid):
    figure = Figure(figsize=(width, height), layout="constrained")
    figure.suptitle(title)
    return figure, figure.subplots(**grid)


def curves_figure(curves, title, ylabel="loss", log=True):
    """One line per task (``curves``: label -> curve), in label order."""
    figure, axes = _new_figure(title)
    for index, (label, points) in enumerate(sorted(curves.items())):
        steps, values = zip(*points)
        axes.plot(steps, values, color=color(index), label=label)
    if log:
        axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.legend()
    return figure


def _clip_point(curve, limit):
    """How much of a diverged curve to draw: the index of its first value that
    is not finite or above ``limit`` (its last when none is)."""
    for index, (_, value) in enumerate(curve):
        if not math.isfinite(value) or value > limit:
            return index
    return len(curve) - 1


def hpo_figure(trials, what, ylabel="validation MSE"):
    """Every trial's curve (``trials``: label -> curve, in trial order). The
    value axis ends CLIP_HEADROOM times above the trials that did not diverge;
    a diverged trial is drawn up to that edge and marked 'diverged' with an x;
    the best trial is drawn thicker and starred."""
    winner = best(trials)
    failed = [label for label, curve in trials.items() if diverged(curve)]
    healthy = [value for label, curve in trials.items() if label not in failed for _, value in curve]
    finite = healthy or [value for curve in trials.values() for _, value in curve if math.isfinite(value)]
    limit = CLIP_HEADROOM * max(finite, default=1.0)
    if winner is None:
        result = f"every trial diverged (marked x at the axis limit {limit:.3g})"
    else:
        result = f"best: {winner} ({ylabel} {trials[winner][-1][1]:.4g})"
        if failed:
            result += f"; {len(failed)} diverged (marked x)"
    figure, axes = _new_figure(f"{what}, {len(trials)} trials\n{result}")
    for index, (label, curve) in enumerate(trials.items()):
        steps = [step for step, _ in curve]
        values = [value for _, value in curve]
        if label in failed:
            end = _clip_point(curve, limit)
            steps, values = steps[:end + 1], values[:end] + [limit]
            axes.plot(steps, values, color=color(index), label=f"{label}: diverged")
            axes.plot(steps[-1:], [limit], marker="x", markersize=12, markeredgewidth=2.5, color=color(index),
                      linestyle="none", clip_on=False)
            axes.annotate(f"diverged at step {steps[-1]}", (steps[-1], limit), xytext=(6, -14),
                          textcoords="offset points", color=color(index), annotation_clip=False)
        elif label == winner:
            axes.plot(steps, values, color=color(index), linewidth=3.5, label=f"{label}: {values[-1]:.4g} (best)")
            axes.plot(steps[-1:], values[-1:], marker="*", markersize=16, color=color(index), linestyle="none")
        else:
            axes.plot(steps, values, color=color(index), label=f"{label}: {values[-1]:.4g}")
    axes.set_yscale("log")
    axes.set_ylim(top=limit)
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.legend()
    return figure


def finetune_figure(base_curve, tasks):
    """The pretraining curve, then each task's fine-tune (solid) beside its
    from-scratch baseline (dashed, the same colour). ``tasks`` is a list of
    dicts with "name", "finetune" and "scratch" (training curves) and
    "finetune_test", "scratch_test" (test MSE after training)."""
    won = [task for task in tasks if task["finetune_test"] < task["scratch_test"]]
    lost = [task["name"] for task in tasks if task not in won]
    result = f"fine-tune beat scratch in {len(won)} of {len(tasks)} tasks (test MSE)"
    if lost:
        result += f"; not in {', '.join(lost)}"
    figure, (pretraining, tuning) = _new_figure(
        f"One pretrained base, fine-tuned vs trained from scratch on {len(tasks)} tasks\n{result}",
        width=12, height=5, ncols=2, width_ratios=[1, 2])
    steps, values = zip(*base_curve)
    pretraining.plot(steps, values, color="black", label="base (all ranks)")
    pretraining.set_title("pretraining")
    for index, task in enumerate(tasks):
        for kind, style in (("finetune", "-"), ("scratch", "--")):
            steps, values = zip(*task[kind])
            what = "fine-tune" if kind == "finetune" else "scratch"
            tuning.plot(steps, values, color=color(index), linestyle=style,
                        label=f"{task['name']} {what}: test {task[kind + '_test']:.4g}")
    tuning.set_title("each task: fine-tune (solid) vs from scratch (dashed)")
    for axes in (pretraining, tuning):
        axes.set_yscale("log")
        axes.set_xlabel("step")
        axes.set_ylabel("training MSE")
    pretraining.legend()
    tuning.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure


def ensemble_figure(members, ensemble_accuracy):
    """Each member's test-loss curve, and the test accuracy of every member,
    of the ensemble and of the mean member. ``members`` maps a label to a
    dict with "curve" (test loss) and "accuracy"."""
    accuracies = [member["accuracy"] for member in members.values()]
    mean = sum(accuracies) / len(accuracies)
    figure, (curves, scores) = _new_figure(
        f"Ensemble of {len(members)} members vs its members (test accuracy)\n"
        f"ensemble {ensemble_accuracy:.3f} vs mean member {mean:.3f} ({ensemble_accuracy - mean:+.3f}); "
        f"best member {max(accuracies):.3f}", width=12, height=5, ncols=2)
    for index, (label, member) in enumerate(members.items()):
        steps, values = zip(*member["curve"])
        curves.plot(steps, values, color=color(index), label=label)
        scores.plot([index], [member["accuracy"]], marker="o", markersize=10, color=color(index),
                    linestyle="none", label=label)
    scores.plot([len(members)], [ensemble_accuracy], marker="*", markersize=18, color="black",
                linestyle="none", label="ensemble")
    scores.axhline(mean, color="gray", linestyle="--", label=f"mean member {mean:.3f}")
    everything = accuracies + [ensemble_accuracy]
    for index, value in enumerate(everything):
        scores.annotate(f"{value:.3f}", (index, value), xytext=(12, -4), textcoords="offset points")
    margin = max(0.02, 0.5 * (max(everything) - min(everything)))
    scores.set_xlim(-0.5, len(members) + 0.8)
    scores.set_ylim(max(0.0, min(everything) - margin), min(1.0, max(everything) + margin))
    scores.set_xticks(range(len(members) + 1), [label.replace(" (", "\n(") for label in members] + ["ensemble"])
    scores.set_ylabel("test accuracy")
    scores.set_title("test accuracy")
    scores.legend(fontsize="small")
    curves.set_xlabel("step")
    curves.set_ylabel("test loss")
    curves.set_title("each member's test loss")
    curves.legend()
    return figure


def rates(samples):
    """Throughput between consecutive samples of a set's counters
    (``samples``: (seconds, bytes, ops) with bytes and ops running totals),
    as (seconds at the interval's end, GB/s, ops/s)."""
    out = []
    for (t0, bytes0, ops0), (t1, bytes1, ops1) in zip(samples, samples[1:]):
        if t1 > t0:
            out.append((t1, (bytes1 - bytes0) / (t1 - t0) / 1e9, (ops1 - ops0) / (t1 - t0)))
    return out


def throughput_figure(series, title):
    """Each set's throughput over time, GB/s above and ops/s below, one line
    per set (``series``: label -> samples, as for ``rates``)."""
    figure, (volume, count) = _new_figure(title, width=10, height=6, nrows=2, sharex=True)
    for index, (label, samples) in enumerate(series.items()):
        points = rates(samples)
        seconds = [t for t, _, _ in points]
        volume.plot(seconds, [gbps for _, gbps, _ in points], color=color(index), marker=".", label=label)
        count.plot(seconds, [ops for _, _, ops in points], color=color(index), marker=".", label=label)
    volume.set_ylabel("GB/s (payload per rank)")
    count.set_ylabel("ops/s")
    count.set_xlabel("seconds since training started")
    volume.set_ylim(bottom=0)
    count.set_ylim(bottom=0)
    volume.legend()
    return figure
