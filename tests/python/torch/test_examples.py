"""The multi-task examples run on 4 ranks, report every task and write their
learning curves."""

import os
import re

import pytest

from helpers import REPO, horarun

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_example(name, tmp_path, *args):
    out = tmp_path / f"{name}.png"
    result = horarun([os.path.join(REPO, "examples", f"{name}.py"), "--out", str(out)] + list(args), timeout=150)
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    return result.stdout


def test_multitask_trains_two_tasks_side_by_side(tmp_path):
    stdout = run_example("multitask", tmp_path, "--steps", "60")
    assert "[spirals classifier] training on ranks [0, 2]" in stdout
    assert "[sine regression] training on ranks [1, 3]" in stdout
    for task in ("spirals classifier", "sine regression"):
        losses = [float(v) for v in re.findall(rf"\[{task}\] step \d+: loss ([0-9.]+)", stdout)]
        assert len(losses) == 2 and losses[-1] < losses[0], stdout
        assert f"[{task}] final: loss" in stdout


@pytest.mark.parametrize("name, args, expected", [
    ("hpo", ["--steps", "20", "--trials", "2"], r"best trial: \d, lr="),
    ("ensemble", ["--steps", "20"], r"ensemble of 2 members: test accuracy 0\.\d+"),
    ("ab_test", ["--steps", "20"], r"test MSE: A [0-9.]+, B [0-9.]+; B - A ="),
    ("finetune", ["--steps", "20"], r"\[fine-tune 3 .*\] final: test MSE"),
])
def test_other_examples_report_their_tasks(tmp_path, name, args, expected):
    assert re.search(expected, run_example(name, tmp_path, *args))
