"""The seed scenario: even and odd sets each allreduce on their own set."""

import ast
import os
import re

import numpy as np

from conftest import REPO, horarun


def learned(stdout, task):
    match = re.search(rf"{task} task learned w = (\[[^\]]*\])", stdout)
    assert match, stdout
    return np.array(ast.literal_eval(match.group(1)))


def check_seed_output(result):
    """Asserts that examples/seed_numpy.py ran on 4 ranks: each set summed its
    own ranks and learned its own weights."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("even set [0, 2]: sum of ranks = 2") == 2, result.stdout
    assert result.stdout.count("odd set [1, 3]: sum of ranks = 4") == 2, result.stdout
    np.testing.assert_allclose(learned(result.stdout, "even"), [2.0, -1.0, 0.5], atol=0.01)
    np.testing.assert_allclose(learned(result.stdout, "odd"), [-3.0, 0.0, 1.5], atol=0.01)


def test_even_and_odd_sets_sum_their_own_ranks():
    check_seed_output(horarun([os.path.join(REPO, "examples", "seed_numpy.py")], np=4))
