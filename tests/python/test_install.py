"""hora installed as a user installs it: the portable wheel (`make wheel`,
build/wheelhouse) in a fresh virtual environment with only what pip brings,
nothing of this repository on sys.path, and the seed scenario on 4 ranks
through each launcher."""

import glob
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, mpi_unavailable
from test_seed import check_seed_output

WHEELHOUSE = os.path.join(REPO, "build", "wheelhouse")
# What must come from inside the wheel if the extension needs it at all.
SYSTEM_ONLY_LIBRARIES = re.compile(r"^lib(gloo|mpi|open-rte|open-pal|hiredis|ibverbs)[.-]")


def portable_wheel():
    wheels = glob.glob(os.path.join(WHEELHOUSE, "hora-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {WHEELHOUSE} (make wheel builds it), found {wheels}"
    return wheels[0]


class UserEnvironment:
    """A venv of this Python with hora, its dependencies and the horovod
    shim installed from the wheel; commands run from a folder outside the
    repository, with PYTHONPATH unset."""

    def __init__(self, root):
        self.root = root
        self.venv = os.path.join(root, "venv")
        self.workdir = os.path.join(root, "work")
        os.makedirs(self.workdir)
        self.python = os.path.join(self.venv, "bin", "python")

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("HORA_")}
        env["PATH"] = os.path.join(self.venv, "bin") + os.pathsep + env.get("PATH", "")
        env.update(extra)
        return env

    def run(self, args, timeout=180, **extra_env):
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=self.workdir,
                              env=self.env(**extra_env))

    def succeeded(self, args, **kwargs):
        result = self.run(args, **kwargs)
        assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def package_dir(self):
        return self.succeeded([self.python, "-c", "import hora, os; print(os.path.dirname(hora.__file__))"]
                              ).stdout.strip()


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    wheel = portable_wheel()
    root = str(tmp_path_factory.mktemp("user"))
    environment = UserEnvironment(root)
    # This interpreter's base Python (the wheel is built for its version).
    subprocess.run([sys.executable, "-m", "venv", environment.venv], check=True, capture_output=True)
    shim = os.path.join(root, "horovod-shim")
    shutil.copytree(os.path.join(REPO, "compat", "horovod"), shim,
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    environment.succeeded([environment.python, "-m", "pip", "install", "--quiet", wheel, shim], timeout=600)
    shutil.copy(os.path.join(REPO, "examples", "seed_numpy.py"), environment.workdir)
    return environment


def test_the_wheel_has_a_manylinux_tag():
    wheel = portable_wheel()
    shown = subprocess.run([os.path.join(os.path.dirname(sys.executable), "auditwheel"), "show", wheel],
                           capture_output=True, text=True, check=True).stdout
    tag = re.search(r'platform tag:\s*"(manylinux_\d+_\d+_x86_64)"', " ".join(shown.split()))
    assert tag, shown
    assert tag.group(1) in os.path.basename(wheel), (tag.group(1), wheel)


def manylinux_libraries(tag):
    """The libraries a wheel with this manylinux tag may take from the system."""
    policies = json.loads((importlib.resources.files("auditwheel.policy") / "manylinux-policy.json").read_text())
    name = tag[:-len("_x86_64")]
    policy = next(p for p in policies if p["name"] == name or name in p["aliases"])
    return set(policy["lib_whitelist"]) | {"ld-linux-x86-64.so.2", "linux-vdso.so.1"}


@pytest.mark.parametrize("library", ["_core*.so", "libhora_core.so", "libhora_mpi.so"])
def test_the_installed_libraries_need_only_manylinux_ones(user, library):
    package = user.package_dir()
    allowed = manylinux_libraries(re.search(r"manylinux_\d+_\d+_x86_64", portable_wheel()).group(0))
    (path,) = glob.glob(os.path.join(package, library))
    lines = user.succeeded(["ldd", path]).stdout.splitlines()
    bundled = os.path.join(os.path.dirname(package), "hora.libs")
    outside = []
    for line in lines:
        name, _, found = line.strip().partition(" => ")
        name, found = os.path.basename(name.split()[0]), os.path.normpath(found.split(" (")[0])
        inside = os.path.dirname(found) in (package, bundled)
        if not inside and (name not in allowed or SYSTEM_ONLY_LIBRARIES.match(name)):
            outside.append(line.strip())
    assert not outside, "\n".join(lines)
    assert not any("libmpi" in line or "libopen-" in line for line in lines), "\n".join(lines)
    assert any("hora.libs/libgloo" in line for line in lines), "\n".join(lines)


LAUNCHERS = {
    "horarun": ["horarun", "-np", "4"],
    "python -m hora.runner": ["python", "-m", "hora.runner", "-np", "4"],
    "horovodrun": ["horovodrun", "-np", "4"],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_seed_scenario_runs_through_each_launcher(user, launcher):
    result = user.run(LAUNCHERS[launcher] + ["python", "seed_numpy.py"])
    check_seed_output(result)


@pytest.mark.skipif(mpi_unavailable() is not None, reason=str(mpi_unavailable()))
def test_the_seed_scenario_runs_on_the_system_mpi(user):
    result = user.run(["horarun", "--mpi", "-np", "4", "python", "seed_numpy.py"])
    check_seed_output(result)


# Whether MPI's library is mapped into the process that prints this.
MPI_MAPPED = "print('libmpi' in open('/proc/self/maps').read())"


def test_mpi_is_loaded_only_when_asked_for(user):
    result = user.succeeded(["python", "-c", "import hora.numpy as hvd; hvd.init(); " + MPI_MAPPED +
                             "; hvd.shutdown(); print(hvd.mpi_built()); " + MPI_MAPPED])
    mpi = mpi_unavailable() is None
    assert result.stdout.split() == ["False", str(mpi), str(mpi)], result.stdout


@pytest.mark.skipif(mpi_unavailable() is not None, reason=str(mpi_unavailable()))
def test_a_missing_mpi_library_is_a_clear_error(user):
    # HORA_MPI_LIBRARY names a library no machine has, as libmpi.so.40 is
    # where Open MPI is not installed.
    missing = {"HORA_MPI_LIBRARY": "libmpi-missing.so.40"}
    built = user.succeeded(["python", "-c", "import hora.numpy as hvd; print(hvd.mpi_built())"], **missing)
    assert built.stdout.split() == ["False"], built.stdout
    result = user.run(["python", "-c", "import hora.numpy as hvd; hvd.init()"], HORA_BACKEND="mpi", **missing)
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stderr}"
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("ValueError: "), result.stderr
    for words in ("the MPI backend needs libmpi-missing.so.40", "cannot open shared object file",
                  "apt-get install libopenmpi3", "horarun without --mpi"):
        assert words in error, error


@pytest.fixture(scope="module")
def torch_user(user):
    """The user's environment with the [torch] extra, pinned to the CPU
    build this project tests with."""
    user.succeeded([user.python, "-m", "pip", "install", "--quiet", portable_wheel() + "[torch]", "torch==2.13.0"],
                   timeout=900)
    return user


def test_torchrun_starts_one_job_with_the_torch_extra(torch_user):
    result = torch_user.run(["torchrun", "--standalone", "--nproc_per_node", "4", "seed_numpy.py"],
                            OMP_NUM_THREADS="1")
    check_seed_output(result)


def test_the_readmes_pytorch_example_runs_as_installed(torch_user):
    with open(os.path.join(REPO, "README.md")) as f:
        example = re.search(r"## PyTorch\n\n```python\n(.*?)```", f.read(), re.S).group(1)
    with open(os.path.join(torch_user.workdir, "readme_torch.py"), "w") as f:
        f.write(example + "print('RANK', hvd.rank(), 'LOSS', float(loss))\n")
    result = torch_user.run(["horarun", "-np", "4", "python", "readme_torch.py"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"RANK (\d)", result.stdout)) == ["0", "1", "2", "3"], result.stdout
