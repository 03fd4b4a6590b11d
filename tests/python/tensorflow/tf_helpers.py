"""Running the TensorFlow workers through horarun, and reading what they report."""

import os
import re

from conftest import REPO, horarun

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")

# What the workers' checks print: "ok <check> <set> <dtype> <mode>", behind
# horarun's "[rank]:" or mpirun's "[1,rank]<stdout>:" (which may run two
# ranks' lines together).
_PREFIX = r"\[(?:\d+,)?(\d+)\](?:<stdout>)?:"
_WORD = r"([^\s\[]+)"
_OK = re.compile(_PREFIX + "ok " + " ".join([_WORD] * 4))
_FAIL = re.compile(_PREFIX + "FAIL " + _WORD)


def run_tf_worker(name, np=4, args=(), env=None, timeout=300, launcher_args=(), backend="gloo"):
    """Runs tests/python/tensorflow/workers/<name> on ``np`` ranks; returns
    the CompletedProcess (the caller checks the exit status)."""
    full_env = {"PYTHONPATH": os.pathsep.join([WORKERS, os.environ.get("PYTHONPATH", "")]),
                "TF_CPP_MIN_LOG_LEVEL": "2", "HORA_OP_TIMEOUT_SECONDS": "60"}
    full_env.update(env or {})
    return horarun([os.path.join(WORKERS, name)] + list(args), np=np, env=full_env, timeout=timeout,
                   backend=backend, launcher_args=launcher_args)


def describe(result):
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-20000:]}\nstderr:\n{result.stderr[-8000:]}"


def passed(result, check):
    """``(rank, set, dtype, mode)`` of every passed run of ``check``."""
    return [(int(rank), label, dtype, mode) for rank, name, label, dtype, mode in _OK.findall(result.stdout)
            if name == check]


def failed(result, check):
    return [int(rank) for rank, name in _FAIL.findall(result.stdout) if name == check]


__all__ = ["REPO", "WORKERS", "describe", "failed", "horarun", "passed", "run_tf_worker"]
