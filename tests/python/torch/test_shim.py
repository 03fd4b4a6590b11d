"""The hora-horovod package: a Horovod script runs unchanged on it and prints
the numbers hora.torch gives; it refuses to shadow a real Horovod."""

import json
import os
import subprocess
import sys

from helpers import REPO, WORKERS, horarun


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


def test_shim_has_horovods_module_layout(shim_site):
    result = horarun([os.path.join(WORKERS, "shim_layout.py")], np=2, env=with_path(shim_site))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("layout ok") == 2, result.stdout


def test_get_env_rank_and_size_reads_the_launchers_variables(shim_site):
    code = "from horovod.runner.common.util.env import get_env_rank_and_size as f; print(f())"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_", "OMPI_", "PMI"))
             and k not in ("RANK", "WORLD_SIZE")}
    for variables, expected in (({}, "(0, 1)"), ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}, "(3, 4)"),
                                ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
                                 "(1, 2)")):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env={**clean, **variables, **with_path(shim_site)})
        assert result.stdout.strip() == expected, (variables, result.stderr)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**clean, "HOROVOD_RANK": "1", **with_path(shim_site)})
    assert "only one of HOROVOD_RANK and HOROVOD_SIZE" in result.stderr, result.stderr


def test_shim_refuses_to_shadow_a_real_horovod(shim_site, tmp_path):
    metadata = tmp_path / "horovod-0.28.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n")
    result = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True,
                            env={**os.environ, **with_path(shim_site, tmp_path)})
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "real Horovod installation" in result.stderr, result.stderr
    assert "0.28.1" in result.stderr and "refuses to shadow" in result.stderr, result.stderr


def run_with_shim(shim_site, args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **with_path(shim_site)})


def test_shim_has_the_helpers_horovods_tests_import(shim_site):
    result = run_with_shim(shim_site, [sys.executable, os.path.join(WORKERS, "shim_helpers.py")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "helpers ok\n", result.stdout
    # Horovod's own test utilities import what they need from the package.
    code = ("import horovod.runner, horovod.runner.launch, horovod.common.util, horovod.common.exceptions as e;"
            "from horovod.runner.util.threads import in_thread, execute_function_multithreaded;"
            "from horovod.common.util import env, gloo_built, mpi_built;"
            "assert horovod.runner.run is __import__('hora.runner').runner.run;"
            "assert {'HorovodInternalError', 'HostsUpdatedInterrupt', 'get_version_mismatch_message',"
            "        'HorovodVersionMismatchError'} <= set(dir(e)); print('ok')")
    result = run_with_shim(shim_site, [sys.executable, "-c", code])
    assert result.stdout == "ok\n", result.stderr


RUN_ON_TWO_RANKS = """
import horovod.runner

def step(scale):
    import torch
    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    gathered = hvd.allgather_object(lambda x, factor=hvd.rank() + 1: x * factor)
    return hvd.rank(), total.item() * scale, [f(10) for f in gathered]

print(horovod.runner.run(step, args=(2,), np=2))
"""


def test_horovod_runner_run_returns_results_in_rank_order(shim_site):
    result = run_with_shim(shim_site, [sys.executable, "-c", RUN_ON_TWO_RANKS])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "[(0, 6.0, [10, 20]), (1, 6.0, [10, 20])]", result.stdout


def test_horovodrun_runs_an_unchanged_horovod_script(shim_site):
    horovodrun = shim_site / "bin" / "horovodrun"
    assert horovodrun.exists(), "the package installs no horovodrun script"
    result = run_with_shim(shim_site, [str(horovodrun), "-np", "2", "--cycle-time-ms", "1", sys.executable,
                                       os.path.join(WORKERS, "horovod_script.py")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(f"with horovod from {shim_site}") == 2, result.stdout
    assert result.stdout.count("epoch 2 loss") == 1, result.stdout
    assert result.stderr.count("--cycle-time-ms has no effect on hora") == 1, result.stderr
    refused = run_with_shim(shim_site, [str(horovodrun), "-np", "2", "--jsrun", sys.executable, "-c", "pass"])
    assert refused.returncode == 2
    assert "--jsrun is not supported by hora yet" in refused.stderr


def test_a_horovod_elastic_script_runs_unchanged_under_horovodrun(shim_site, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:2\n")
    script = os.path.join(WORKERS, "horovod_elastic_synthetic.py")
    env = {**os.environ, **with_path(shim_site), "HORA_ELASTIC_DISCOVERY_INTERVAL": "0.2", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([str(shim_site / "bin" / "horovodrun"), "--min-np", "2", "--max-np", "2",
                             "--host-discovery-script", f"cat {hosts}", sys.executable, script, "2", "5",
                             str(tmp_path)], capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    outcomes = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [o["size"] for o in outcomes] == [2, 2] and outcomes[0]["params"] == outcomes[1]["params"]
    assert outcomes[0]["loss"] == outcomes[1]["loss"]
