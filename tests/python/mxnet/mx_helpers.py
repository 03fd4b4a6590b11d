"""Running the MXNet workers through horarun (in .venv-mxnet, whose python
runs these tests), and reading what they report."""

import os
import re

from conftest import REPO, horarun

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")

# What the workers' checks print: "ok <check> <set> <dtype>", behind
# horarun's "[rank]:".
_PREFIX = r"\[(\d+)\]:"
_WORD = r"([^\s\[]+)"
_OK = re.compile(_PREFIX + "ok " + " ".join([_WORD] * 3))
_FAIL = re.compile(_PREFIX + "FAIL " + _WORD)


def run_mx_worker(name, np=4, args=(), env=None, timeout=300):
    """Runs tests/python/mxnet/workers/<name> on ``np`` ranks under Gloo;
    returns the CompletedProcess (the caller checks the exit status)."""
    full_env = {"PYTHONPATH": os.pathsep.join([WORKERS, os.environ.get("PYTHONPATH", "")]),
                "HORA_OP_TIMEOUT_SECONDS": "60", "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}
    full_env.update(env or {})
    return horarun([os.path.join(WORKERS, name)] + list(args), np=np, env=full_env, timeout=timeout,
                   backend="gloo")


def describe(result):
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-20000:]}\nstderr:\n{result.stderr[-8000:]}"


def passed(result, check):
    """``(rank, set, dtype)`` of every passed run of ``check``."""
    return [(int(rank), label, dtype) for rank, name, label, dtype in _OK.findall(result.stdout) if name == check]


def failed(result, check):
    return [int(rank) for rank, name in _FAIL.findall(result.stdout) if name == check]


__all__ = ["REPO", "WORKERS", "describe", "failed", "passed", "run_mx_worker"]
