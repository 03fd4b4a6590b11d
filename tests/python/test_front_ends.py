"""hora.common imports no framework, dispatches ProcessSet ops by tensor type
and runs the whole op matrix for a framework given only an Adapter."""

import os
import subprocess
import sys

from conftest import REPO, WORKERS


def test_common_is_framework_free_and_a_new_framework_is_one_adapter():
    result = subprocess.run([sys.executable, os.path.join(WORKERS, "front_ends.py")], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "front ends ok" in result.stdout
