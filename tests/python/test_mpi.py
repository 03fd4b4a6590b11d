"""hora under MPI: plain mpirun without horarun, choosing the backend, and
mpi4py communicators (init(comm=...), ProcessSet(comm))."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, WORKERS, horarun, mpi_unavailable

pytestmark = pytest.mark.skipif(mpi_unavailable() is not None, reason=str(mpi_unavailable()))

try:
    import mpi4py  # noqa: F401  (only imported here; it initialises MPI on `from mpi4py import MPI`)
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed")


def mpirun(args, np=4, env=None, timeout=120):
    """Runs ``python args...`` as a user would, with plain mpirun."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = ["mpirun"] + root + ["--oversubscribe", "-np", str(np), sys.executable] + list(args)
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


def worker(name):
    return os.path.join(WORKERS, name)


def succeeded(result):
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def reports(result, np=4):
    """The REPORT of each rank (backend_report.py), by rank. mpirun may join
    the lines of different ranks, so each report is decoded where it starts."""
    text, decoder, found = succeeded(result).stdout, json.JSONDecoder(), []
    start = text.find("REPORT ")
    while start >= 0:
        report, end = decoder.raw_decode(text, start + len("REPORT "))
        found.append(report)
        start = text.find("REPORT ", end)
    assert sorted(r["rank"] for r in found) == list(range(np)), text
    return sorted(found, key=lambda r: r["rank"])


def test_plain_mpirun_runs_every_collective_on_the_mpi_backend():
    result = succeeded(mpirun([worker("collectives.py")]))
    for label, count in (("global", 4), ("even", 2), ("odd", 2), ("upper", 3), ("solo", 1)):
        assert result.stdout.count(f"set {label} ok") == count, result.stdout


def test_plain_mpirun_gives_each_rank_its_place_from_the_launcher():
    ranks = reports(mpirun([worker("backend_report.py")]))
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert (str(r["rank"]), str(r["local_rank"])) == (r["env_rank"], r["env_local_rank"])
        assert (r["size"], r["local_size"], r["cross_rank"], r["cross_size"]) == (4, 4, 0, 1)
        assert r["mpi_built"] and r["mpi_enabled"] and r["mpi_threads_supported"]
        assert not r["gloo_enabled"]


@pytest.mark.parametrize("variable", ["HORA_BACKEND", "HOROVOD_CPU_OPERATIONS", "HOROVOD_CONTROLLER"])
def test_gloo_can_be_chosen_under_mpirun(variable):
    for r in reports(mpirun([worker("backend_report.py")], env={variable: "gloo"})):
        assert r["gloo_enabled"] and not r["mpi_enabled"], r
        assert r["size"] == 4 and str(r["rank"]) == r["env_rank"]


def test_gloo_under_mpirun_runs_every_collective():
    result = succeeded(mpirun([worker("collectives.py")], env={"HORA_BACKEND": "gloo"}))
    assert result.stdout.count("done") == 4, result.stdout


def test_horarun_without_mpi_runs_gloo_and_says_so():
    for r in reports(horarun([worker("backend_report.py")], np=2), np=2):
        assert r["gloo_enabled"] and r["mpi_built"], r
        assert not r["mpi_enabled"] and not r["mpi_threads_supported"], r


def test_an_unknown_backend_is_a_clear_error():
    result = mpirun(["-c", "import hora.numpy as hvd; hvd.init()"], np=2, env={"HORA_BACKEND": "nccl"})
    assert result.returncode != 0
    assert "HORA_BACKEND='nccl' must be tcp, gloo or mpi" in result.stderr, result.stderr


def test_the_mpi_backend_refuses_ranks_that_mpi_did_not_start():
    result = horarun(["-c", "import hora.numpy as hvd; hvd.init()"], np=2, env={"HORA_BACKEND": "mpi"})
    assert result.returncode != 0
    assert "needs an MPI launcher" in result.stderr, result.stderr


def test_a_rank_that_dies_of_an_exception_ends_the_job_at_once():
    script = ("import hora.numpy as hvd\n"
              "hvd.init()\n"
              "if hvd.rank() == 1: raise RuntimeError('rank 1 fails')\n"
              "hvd.barrier()\n"
              "hvd.barrier()\n")
    start = time.monotonic()
    result = mpirun(["-c", script], timeout=60)
    assert result.returncode != 0
    assert "rank 1 fails" in result.stderr, result.stderr
    assert time.monotonic() - start < 30


@needs_mpi4py
def test_process_sets_from_mpi4py_communicators():
    assert succeeded(mpirun([worker("mpi_comm_sets.py")])).stdout.count("done") == 4


@needs_mpi4py
def test_init_with_a_sub_communicator_makes_it_the_world():
    assert succeeded(mpirun([worker("mpi_comm_world.py"), "split"])).stdout.count("done") == 4


@needs_mpi4py
def test_init_with_ranks_of_comm_world_leaves_the_others_out():
    assert succeeded(mpirun([worker("mpi_comm_world.py"), "ranks"])).stdout.count("done") == 4
