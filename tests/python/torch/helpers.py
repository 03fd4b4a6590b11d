"""Running the torch workers through horarun."""

import os

from conftest import REPO, horarun

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def run_torch_worker(name, np=4, args=(), env=None, timeout=120):
    """Runs tests/python/torch/workers/<name> on ``np`` ranks; fails with its
    output unless every rank exits 0."""
    result = horarun([os.path.join(WORKERS, name)] + list(args), np=np, env=env, timeout=timeout)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


__all__ = ["REPO", "WORKERS", "horarun", "run_torch_worker"]
