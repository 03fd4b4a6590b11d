import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
REPO = os.path.dirname(os.path.dirname(HERE))


def horarun(args, np=4, env=None, timeout=120):
    """Runs ``horarun -np N python args...``; returns the CompletedProcess."""
    cmd = [sys.executable, "-m", "hora.runner", "-np", str(np), sys.executable] + list(args)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


@pytest.fixture
def run_worker():
    """Runs tests/python/workers/<name>.py on N ranks and fails with its output
    unless every rank exits 0."""

    def run(name, np=4, args=(), env=None, timeout=120):
        result = horarun([os.path.join(WORKERS, name)] + list(args), np=np, env=env, timeout=timeout)
        assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        return result

    return run
