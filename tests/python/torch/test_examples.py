"""The multi-task examples run on 4 ranks with the command their docstring
gives (as written, from the repository root, in a fresh shell: see
tests/python/documented_commands.py), report every task, and write a PNG
whose title states the outcome; the figures themselves are checked on
recorded data, where their lines, markers and legends can be counted."""

import math
import os
import re
import sys

import pytest

from documented_commands import EXAMPLES, describe, docstring_command, repository_root, run_as_written

sys.path.insert(0, EXAMPLES)
import plots  # noqa: E402  (examples/plots.py: matplotlib only)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TORCH_EXAMPLES = ("multitask", "hpo", "ensemble", "ab_test", "finetune", "set_throughput")


def run_example(name, tmp_path, steps):
    """Runs the example as its docstring says, with HORA_EXAMPLE_STEPS=steps;
    returns its stdout and the title it printed for its PNG."""
    root = repository_root(str(tmp_path / "repo"))
    result = run_as_written(docstring_command(name), root, HORA_EXAMPLE_STEPS=str(steps))
    assert result.returncode == 0, describe(result)
    with open(os.path.join(root, f"{name}.png"), "rb") as png:
        assert png.read(8) == PNG_SIGNATURE
    titles = re.findall(rf"^\[0\]:{name}\.png: (.+)$", result.stdout, re.MULTILINE)
    assert len(titles) == 1, describe(result)
    return result.stdout, titles[0]


@pytest.mark.parametrize("name", TORCH_EXAMPLES + ("seed_numpy",))
def test_docstring_gives_the_readme_form_of_the_command(name):
    assert docstring_command(name) == f".venv/bin/horarun -np 4 .venv/bin/python examples/{name}.py"


def test_multitask_trains_two_tasks_side_by_side(tmp_path):
    stdout, title = run_example("multitask", tmp_path, steps=60)
    assert "[spirals classifier] training on ranks [0, 2]" in stdout
    assert "[sine regression] training on ranks [1, 3]" in stdout
    for task in ("spirals classifier", "sine regression"):
        losses = [float(v) for v in re.findall(rf"\[{task}\] step \d+: loss ([0-9.]+)", stdout)]
        assert len(losses) == 2 and losses[-1] < losses[0], stdout
        final = re.search(rf"\[{task}\] final: (loss [0-9.]+, \w+ [0-9.]+)", stdout).group(1)
        assert f"{task} {final}" in title
    assert title.startswith("Two tasks side by side on 4 ranks")


def test_hpo_reports_the_best_trial_in_its_figure(tmp_path):
    stdout, title = run_example("hpo", tmp_path, steps=20)
    best = re.search(r"best: (trial \d lr=[0-9.]+), validation MSE", stdout).group(1)
    assert f"best: {best} (validation MSE" in title
    assert len(re.findall(r"^\[0\]:  trial \d", stdout, re.MULTILINE)) == 4


def test_ensemble_compares_itself_with_its_members(tmp_path):
    stdout, title = run_example("ensemble", tmp_path, steps=20)
    accuracy = float(re.search(r"ensemble of 2 members: test accuracy (0\.\d+)", stdout).group(1))
    mean = float(re.search(r"members' test accuracy: .* \(mean (0\.\d+)\)", stdout).group(1))
    assert f"ensemble {accuracy:.3f} vs mean member {mean:.3f}" in title


def test_ab_test_states_the_winner(tmp_path):
    stdout, title = run_example("ab_test", tmp_path, steps=20)
    outcome = re.search(r"^\[0\]:(test MSE: A [0-9.]+, B [0-9.]+; B - A = .*)$", stdout, re.MULTILINE).group(1)
    verdict = re.search(r"^\[0\]:(winner: arm [AB]|no significant difference between the arms)$", stdout,
                        re.MULTILINE).group(1)
    assert f"{verdict}; {outcome}" in title
    assert "± " in outcome and "standard error" in outcome
    # What the curves show is not what the outcome measures: the title says both.
    assert re.search(r"curves: training MSE; outcome: test MSE on \d+ held-out examples", title)


def test_finetune_counts_the_tasks_it_won(tmp_path):
    stdout, title = run_example("finetune", tmp_path, steps=20)
    assert re.search(r"\[fine-tune 3 .*\] final: test MSE", stdout)
    won = re.search(r"fine-tune beat scratch in (\d) of 4 tasks", stdout).group(0)
    assert won in title


def test_set_throughput_counts_each_sets_traffic(tmp_path):
    steps = 30
    stdout, title = run_example("set_throughput", tmp_path, steps=steps)
    # What each set moved, from hvd.metrics(): every gradient, every step.
    for task, tensors, step_bytes in (("wide model", 4, 4 * (256 * 1024 + 1024 + 1024 + 1)),
                                      ("deep model", 34, 4 * (16 * 64 + 64 + 15 * (64 * 64 + 64) + 64 + 1))):
        found = re.search(rf"^\[\d\]:\[{task}\] {steps} steps in [0-9.]+ s: ([0-9.]+) MB in (\d+) ops, "
                          rf"([0-9.]+ GB/s, \d+ ops/s)", stdout, re.MULTILINE)
        assert found, stdout
        assert int(found.group(2)) == tensors * steps
        assert float(found.group(1)) == pytest.approx(step_bytes * steps / 1e6, abs=0.05)
        assert f"{task}, set " in title and found.group(3) in title
    assert title.startswith("Two process sets training side by side on 4 ranks")


def test_an_example_refuses_a_bad_step_count(tmp_path):
    # One process is enough: the options are read before hvd.init().
    root = repository_root(str(tmp_path / "repo"))
    result = run_as_written(".venv/bin/python examples/ab_test.py", root, HORA_EXAMPLE_STEPS="ten")
    assert result.returncode != 0
    assert "HORA_EXAMPLE_STEPS must be a positive integer, got 'ten'" in result.stderr, describe(result)


# The figures on recorded data.

def labelled_lines(axes):
    return [line for line in axes.get_lines() if not line.get_label().startswith("_")]


def legend_texts(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def curve(*values, every=10):
    return [(every * (i + 1), value) for i, value in enumerate(values)]


def test_diverged_curves():
    assert not plots.diverged(curve(0.5, 0.2, 0.1))
    assert plots.diverged(curve(0.5, math.inf))
    assert plots.diverged(curve(0.5, 0.3, 6.0))  # finite, but 12 times its start
    assert plots.best({"a": curve(0.5, 0.2), "b": curve(0.5, 0.1), "c": curve(0.5, math.inf)}) == "b"
    assert plots.best({"a": curve(math.inf)}) is None


def test_hpo_figure_shows_every_trial_clips_diverged_ones_and_highlights_the_best():
    trials = {
        "trial 0 lr=0.8": curve(math.inf, math.inf, math.inf),          # diverged at once
        "trial 1 lr=0.2": curve(0.2, 0.05, 1e32, math.inf),             # diverged later, through 1e32
        "trial 2 lr=0.05": curve(0.2, 0.1, 0.02),
        "trial 3 lr=0.0125": curve(0.2, 0.15, 0.1),
    }
    figure = plots.hpo_figure(trials, "Learning-rate search")
    axes = figure.axes[0]
    lines = labelled_lines(axes)
    assert [line.get_label().split(":")[0] for line in lines] == list(trials)
    assert len(legend_texts(axes)) == 4
    assert legend_texts(axes)[2] == "trial 2 lr=0.05: 0.02 (best)"
    assert lines[2].get_linewidth() > lines[3].get_linewidth()
    bottom, top = axes.get_ylim()
    assert top == pytest.approx(plots.CLIP_HEADROOM * 0.2)  # not 1e32
    marks = [text.get_text() for text in axes.texts]
    assert marks == ["diverged at step 10", "diverged at step 30"]
    # Trial 1 is drawn up to the clip edge where it left the axis.
    assert list(lines[1].get_xdata()) == [10, 20, 30] and lines[1].get_ydata()[-1] == pytest.approx(top)
    assert plots.title_of(figure) == ("Learning-rate search, 4 trials — best: trial 2 lr=0.05 "
                                      "(validation MSE 0.02); 2 diverged (marked x)")


def test_hpo_figure_when_every_trial_diverged():
    figure = plots.hpo_figure({"trial 0 lr=0.8": curve(1.0, math.inf)}, "Learning-rate search")
    assert "every trial diverged" in plots.title_of(figure)
    assert [text.get_text() for text in figure.axes[0].texts] == ["diverged at step 20"]


def test_finetune_figure_pairs_each_fine_tune_with_its_baseline():
    tasks = [{"name": f"task {i}", "finetune": curve(0.1, 0.01), "scratch": curve(0.3, 0.02),
              "finetune_test": test, "scratch_test": 0.02} for i, test in enumerate((0.05, 0.01, 0.001))]
    figure = plots.finetune_figure(curve(0.5, 0.1, 0.01), tasks)
    pretraining, tuning = figure.axes
    assert len(labelled_lines(pretraining)) == 1
    lines = labelled_lines(tuning)
    assert len(lines) == 6 and len(legend_texts(tuning)) == 6
    for i in range(3):
        tuned, scratch = lines[2 * i], lines[2 * i + 1]
        assert tuned.get_color() == scratch.get_color()
        assert (tuned.get_linestyle(), scratch.get_linestyle()) == ("-", "--")
        assert tuned.get_label().startswith(f"task {i} fine-tune")
        assert scratch.get_label().startswith(f"task {i} scratch")
    assert len({line.get_color() for line in lines}) == 3
    assert "fine-tune beat scratch in 2 of 3 tasks (test MSE); not in task 0" in plots.title_of(figure)


def test_ensemble_figure_shows_the_ensemble_against_its_members():
    members = {f"member {i} (ranks [{2 * i}, {2 * i + 1}])": {"curve": curve(0.7, 0.5), "accuracy": accuracy}
               for i, accuracy in enumerate((0.80, 0.84))}
    figure = plots.ensemble_figure(members, 0.86)
    curves, scores = figure.axes
    assert len(labelled_lines(curves)) == 2
    assert legend_texts(scores) == list(members) + ["ensemble", "mean member 0.820"]
    points = [line.get_ydata()[0] for line in labelled_lines(scores)]
    assert points[:3] == [0.80, 0.84, 0.86]
    assert [text.get_text() for text in scores.texts] == ["0.800", "0.840", "0.860"]
    assert plots.title_of(figure) == ("Ensemble of 2 members vs its members (test accuracy) — "
                                      "ensemble 0.860 vs mean member 0.820 (+0.040); best member 0.840")


def test_curves_figure_draws_one_line_per_task():
    figure = plots.curves_figure({"b": curve(1.0, 0.5), "a": curve(2.0, 0.1)}, "Two tasks\nresult", ylabel="MSE")
    axes = figure.axes[0]
    assert legend_texts(axes) == ["a", "b"]
    assert axes.get_yscale() == "log" and axes.get_ylabel() == "MSE"
    assert plots.title_of(figure) == "Two tasks — result"


def test_rates_between_samples():
    samples = [(0.0, 0, 0), (0.5, 1e9, 100), (1.0, 1e9, 100), (1.0, 2e9, 150), (2.0, 4e9, 350)]
    # An interval of no time (two samples at once) gives no rate.
    assert plots.rates(samples) == [(0.5, 2.0, 200.0), (1.0, 0.0, 0.0), (2.0, 2.0, 200.0)]


def test_throughput_figure_draws_each_set_in_both_panels():
    series = {"wide, set 1 [0, 2]": [(0.0, 0, 0), (0.2, 4e7, 160), (0.4, 8e7, 320)],
              "deep, set 2 [1, 3]": [(0.0, 0, 0), (0.2, 2e6, 680), (0.4, 4e6, 1360), (0.6, 6e6, 2040)]}
    figure = plots.throughput_figure(series, "Two sets\nresult")
    volume, count = figure.axes
    assert legend_texts(volume) == list(series)
    assert [list(line.get_ydata()) for line in labelled_lines(volume)] == [pytest.approx([0.2, 0.2]),
                                                                          pytest.approx([0.01, 0.01, 0.01])]
    assert [list(line.get_ydata()) for line in labelled_lines(count)] == [pytest.approx([800.0, 800.0]),
                                                                         pytest.approx([3400.0, 3400.0, 3400.0])]
    assert [list(line.get_xdata()) for line in labelled_lines(count)] == [[0.2, 0.4], [0.2, 0.4, 0.6]]
    colors = [line.get_color() for line in labelled_lines(volume)]
    assert colors == [line.get_color() for line in labelled_lines(count)] and colors[0] != colors[1]
    assert plots.title_of(figure) == "Two sets — result"


def test_elastic_multitask_survives_a_lost_worker_and_grows_back(tmp_path):
    root = repository_root(str(tmp_path / "repo"))
    command = docstring_command("elastic_multitask")
    assert command.startswith(".venv/bin/horarun --min-np 2 --max-np 4 --host-discovery-script")
    result = run_as_written(command, root, timeout=240)
    assert result.returncode == 0, describe(result)
    with open(os.path.join(root, "elastic_multitask.png"), "rb") as png:
        assert png.read(8) == PNG_SIGNATURE
    # The odd task lost slot 3's worker at step 40 and went on alone from its
    # commit there; the slot came back and the task grew to two again.
    out = result.stdout
    assert "[sine regression] round 1: 1 ranks [1], going on from step 40" in out, describe(result)
    grown = re.search(r"\[sine regression\] round \d+: 2 ranks \[1, 3\], going on from step (\d+)", out)
    assert grown and int(grown.group(1)) > 40, describe(result)
    # The even task never lost a member: no change of its world, no rollback.
    assert "[spirals classifier] final: loss" in out and "world changes at steps []" in out
    title = re.findall(r"^\[0\]:elastic_multitask\.png: (.+)$", out, re.MULTILINE)[0]
    assert f"world 2->1 at step 40 then 1->2 at step {grown.group(1)}" in title, title


def run_driver_example(name, tmp_path, steps):
    """Runs an example whose driver starts the job itself (Spark, Ray), as
    its docstring says; returns its stdout and the title of its PNG."""
    root = repository_root(str(tmp_path / "repo"))
    command = docstring_command(name)
    assert command == f".venv/bin/python examples/{name}.py"
    result = run_as_written(command, root, timeout=240, HORA_EXAMPLE_STEPS=str(steps))
    assert result.returncode == 0, describe(result)
    with open(os.path.join(root, f"{name}.png"), "rb") as png:
        assert png.read(8) == PNG_SIGNATURE
    titles = re.findall(rf"^{name}\.png: (.+)$", result.stdout, re.MULTILINE)
    assert len(titles) == 1, describe(result)
    return result.stdout, titles[0]


def test_spark_hpo_runs_its_trials_on_sets_in_one_spark_job(tmp_path):
    stdout, title = run_driver_example("spark_hpo", tmp_path, steps=20)
    # Two sets ran two trials each; every trial's line reached the driver from its set's first rank.
    for trial, rank in ((0, 0), (1, 2), (2, 0), (3, 2)):
        assert re.search(rf"^\[{rank}\]:trial {trial} lr=\S+ on ranks \[{rank}, {rank + 1}\]", stdout, re.MULTILINE)
    assert "4 trials on 2 sets of 2 ranks in one Spark job" in stdout
    best = re.search(r"best: (trial \d lr=[0-9.]+), validation MSE", stdout).group(1)
    assert f"best: {best} (validation MSE" in title


def test_ray_ensemble_trains_its_members_on_sets_in_one_executor(tmp_path):
    stdout, title = run_driver_example("ray_ensemble", tmp_path, steps=20)
    assert "2 members on 4 Ray actors" in stdout
    assert "member 0 (ranks [0, 1]): test accuracy" in stdout and "member 1 (ranks [2, 3]): test accuracy" in stdout
    accuracy = float(re.search(r"ensemble of 2 members: test accuracy (0\.\d+)", stdout).group(1))
    mean = float(re.search(r"members' test accuracy: mean (0\.\d+)", stdout).group(1))
    assert f"ensemble {accuracy:.3f} vs mean member {mean:.3f}" in title
