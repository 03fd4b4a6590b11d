"""The TensorFlow examples run on 4 ranks with the command their docstring
gives (as written, from the repository root, in a fresh shell), report every
task and write a PNG whose title states the outcome."""

import os
import re

import pytest

from documented_commands import describe, docstring_command, repository_root, run_as_written

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_example(name, tmp_path, steps):
    root = repository_root(str(tmp_path / "repo"))
    result = run_as_written(docstring_command(name), root, timeout=300, HORA_EXAMPLE_STEPS=str(steps))
    assert result.returncode == 0, describe(result)
    with open(os.path.join(root, f"{name}.png"), "rb") as png:
        assert png.read(8) == PNG_SIGNATURE
    titles = re.findall(rf"^\[0\]:{name}\.png: (.+)$", result.stdout, re.MULTILINE)
    assert len(titles) == 1, describe(result)
    return result.stdout, titles[0]


@pytest.mark.parametrize("name", ("keras_multitask", "tf_hpo"))
def test_docstring_gives_the_readme_form_of_the_command(name):
    assert docstring_command(name) == f".venv/bin/horarun -np 4 .venv/bin/python examples/{name}.py"


def test_keras_multitask_trains_two_keras_tasks_side_by_side(tmp_path):
    stdout, title = run_example("keras_multitask", tmp_path, steps=40)
    # model.fit runs whole epochs: the steps asked for are rounded up, and said so.
    for ran, epochs, batches in re.findall(r"(\d+) steps \(--steps 40 rounded up to (\d+) whole epochs "
                                           r"of (\d+) batches\)", stdout):
        assert int(ran) == int(epochs) * int(batches) and 40 <= int(ran) < 40 + int(batches)
    assert stdout.count("rounded up to") == 2, stdout
    assert "[spirals classifier] training on ranks [0, 2]" in stdout
    assert "[sine regression] training on ranks [1, 3]" in stdout
    for task in ("spirals classifier", "sine regression"):
        losses = [float(v) for v in re.findall(rf"\[{task}\] step \d+: .*loss ([0-9.]+)", stdout)]
        assert len(losses) >= 2 and losses[-1] < losses[0], stdout
        final = re.search(rf"\[{task}\] final: (.+), [0-9.]+ steps/s", stdout).group(1)
        assert f"{task} {final}" in title
    assert title.startswith("Two Keras tasks side by side on 4 ranks")


def test_tf_hpo_reports_the_best_trial_in_its_figure(tmp_path):
    stdout, title = run_example("tf_hpo", tmp_path, steps=20)
    best = re.search(r"best: (trial \d lr=[0-9.]+), validation MSE", stdout).group(1)
    assert f"best: {best} (validation MSE" in title
    assert len(re.findall(r"^\[0\]:  trial \d", stdout, re.MULTILINE)) == 4
