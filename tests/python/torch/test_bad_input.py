"""Bad input to hora.torch, on 4 ranks under each backend: every case gets a
clear error naming what was wrong, nothing hangs, the sets keep working, and
ops after shutdown() are refused (workers/bad_input.py lists the cases)."""

import pytest
from helpers import run_torch_worker

pytestmark = pytest.mark.usefixtures("backend")


def test_bad_input_is_refused_clearly_and_the_sets_keep_working():
    result = run_torch_worker("bad_input.py")
    assert result.stdout.count("bad input ok") == 4, result.stdout
