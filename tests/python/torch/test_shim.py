"""The hora-horovod package: a Horovod script runs unchanged on it and prints
the numbers hora.torch gives; it refuses to shadow a real Horovod."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, WORKERS, horarun


@pytest.fixture(scope="module")
def shim_site(tmp_path_factory):
    """``pip install ./compat/horovod`` into a folder of its own (from a copy,
    so the build leaves nothing in the repository)."""
    root = tmp_path_factory.mktemp("shim")
    source = root / "source"
    shutil.copytree(os.path.join(REPO, "compat", "horovod"), source)
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, text=True)
    assert (site / "horovod" / "torch" / "__init__.py").exists()
    return site


def with_path(*paths):
    return {"PYTHONPATH": os.pathsep.join([str(p) for p in paths] + [os.environ.get("PYTHONPATH", "")])}


def test_horovod_script_gives_the_numbers_of_hora_torch(shim_site):
    result = horarun([os.path.join(WORKERS, "shim_compare.py")], env=with_path(shim_site))
    assert result.returncode == 0, result.stdout + result.stderr
    # The unchanged script ran on the installed package, and so did hora.torch's run of it.
    assert result.stdout.count(f"with horovod from {shim_site}") == 2 * 4, result.stdout
    assert result.stdout.count("same numbers") == 4, result.stdout
    assert result.stdout.count("epoch 2 loss") == 2, result.stdout


def test_shim_exposes_horovod_modules(shim_site):
    code = ("import horovod.torch as hvd, horovod.torch.mpi_ops as m, horovod.common.process_sets as ps, hora.torch;"
            "from horovod.torch.optimizer import DistributedOptimizer;"
            "from horovod.torch.functions import broadcast_object;"
            "assert hvd.allreduce is hora.torch.allreduce and m.Sum == 1 and ps.ProcessSet is hvd.ProcessSet;"
            "assert DistributedOptimizer is hvd.DistributedOptimizer and broadcast_object is hvd.broadcast_object;"
            "print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ,
                                                                                             **with_path(shim_site)})
    assert result.stdout.strip() == "ok", result.stderr


def test_shim_refuses_to_shadow_a_real_horovod(shim_site, tmp_path):
    metadata = tmp_path / "horovod-0.28.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n")
    result = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True,
                            env={**os.environ, **with_path(shim_site, tmp_path)})
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "real Horovod installation" in result.stderr, result.stderr
    assert "0.28.1" in result.stderr and "refuses to shadow" in result.stderr, result.stderr
