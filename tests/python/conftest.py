import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
REPO = os.path.dirname(os.path.dirname(HERE))


def _installed(distribution):
    # By metadata: a module search would find the test folder tests/python/mxnet.
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# MXNet 1.9 needs numpy<1.24: its tests run under .venv-mxnet's python (make
# test runs them there, apart), and a python without mxnet does not collect
# them (docs/testing.md).
collect_ignore = [] if _installed("mxnet") else ["mxnet"]


# The backends every worker runs under: Gloo started by horarun, and MPI
# started by mpirun (through horarun --mpi).
BACKENDS = ("gloo", "mpi")


def mpi_unavailable():
    """Why the MPI backend cannot run here, or None."""
    from hora import _core

    if not _core.mpi_built():
        return "this build of hora has no MPI backend"
    if shutil.which("mpirun") is None:
        return "mpirun is not installed"
    return None


# The backend of the test running now, when it uses the `backend` fixture.
_current_backend = None


def horarun(args, np=4, env=None, timeout=120, backend=None, launcher_args=()):
    """Runs ``horarun [launcher_args] -np N python args...`` (with --mpi for
    the MPI backend); returns the CompletedProcess. ``backend`` defaults to
    the running test's (see the `backend` fixture), else Gloo."""
    backend = backend or _current_backend or "gloo"
    launcher = (["--mpi"] if backend == "mpi" else []) + list(launcher_args)
    cmd = [sys.executable, "-m", "hora.runner"] + launcher + ["-np", str(np), sys.executable] + list(args)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


@pytest.fixture(scope="session")
def shim_site(tmp_path_factory):
    """The horovod shim, ``pip install``ed from a copy of compat/horovod (so
    the build leaves nothing in the repository) into a folder of its own,
    once per run: put it on PYTHONPATH to run a Horovod script on hora."""
    root = tmp_path_factory.mktemp("shim")
    source = root / "source"
    shutil.copytree(os.path.join(REPO, "compat", "horovod"), source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, text=True)
    assert (site / "horovod" / "__init__.py").exists()
    return site


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each backend in turn; MPI is skipped where it cannot run. A test (or a
    module, with ``pytestmark = pytest.mark.usefixtures("backend")``) that
    uses it runs once per backend, and horarun() launches accordingly."""
    global _current_backend
    if request.param == "mpi" and mpi_unavailable():
        pytest.skip(mpi_unavailable())
    _current_backend = request.param
    yield request.param
    _current_backend = None


@pytest.fixture
def run_worker(backend):
    """Runs tests/python/workers/<name>.py on N ranks, under each backend, and
    fails with its output unless every rank exits 0."""

    def run(name, np=4, args=(), env=None, timeout=120):
        result = horarun([os.path.join(WORKERS, name)] + list(args), np=np, env=env, timeout=timeout,
                         backend=backend)
        assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        return result

    return run
