"""Jobs started by launchers other than horarun: torchrun forms one job of
WORLD_SIZE ranks, and so does srun with MASTER_ADDR / MASTER_PORT; present
but inconsistent variables are a clear error, never jobs of size 1
(docs/install.md, "Launching")."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from test_seed import check_seed_output

SEED = os.path.join(REPO, "examples", "seed_numpy.py")
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")


def clean_environment(**extra):
    """This process's environment without any launcher's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HORA_", "HOROVOD_", "SLURM_", "OMPI_", "PMI", "TORCHELASTIC_"))
           and k not in LAUNCHER_VARIABLES}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_torchrun_starts_one_job_of_its_world_size():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    result = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "4", SEED],
                            env=clean_environment(OMP_NUM_THREADS=1), capture_output=True, text=True,
                            timeout=180)
    check_seed_output(result)


def test_srun_with_master_address_starts_one_job(tmp_path):
    # A Slurm step as srun starts it, with the MASTER_ADDR and MASTER_PORT a
    # batch script exports for torch; the processes are started here.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in range(4):
        env = clean_environment(SLURM_JOB_ID=42, SLURM_STEP_ID=0, SLURM_PROCID=rank, SLURM_LOCALID=rank,
                                SLURM_NTASKS=4, SLURM_STEP_NUM_TASKS=4, SLURM_TASKS_PER_NODE="4",
                                SLURM_NODEID=0, SLURM_NNODES=1, SLURM_STEP_NUM_NODES=1,
                                MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS=1)
        ranks.append(subprocess.Popen([sys.executable, SEED], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = [rank.communicate(timeout=180) for rank in ranks]
    result = subprocess.CompletedProcess([], max(r.returncode for r in ranks),
                                         "".join(o for o, _ in outputs), "".join(e for _, e in outputs))
    check_seed_output(result)


def run_init(**variables):
    code = "import hora.numpy as hvd; hvd.init(); print('size', hvd.size(), 'rank', hvd.rank())"
    return subprocess.run([sys.executable, "-c", code], env=clean_environment(**variables),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("variables, message", [
    ({"RANK": 1, "WORLD_SIZE": 4}, "MASTER_ADDR and MASTER_PORT is not set"),
    ({"RANK": 1, "WORLD_SIZE": 4, "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT is not set"),
    ({"RANK": 4, "WORLD_SIZE": 4, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500},
     "rank 4 is outside 0..3"),
    ({"RANK": 0, "WORLD_SIZE": 4, "LOCAL_RANK": 2, "LOCAL_WORLD_SIZE": 2, "MASTER_ADDR": "127.0.0.1",
      "MASTER_PORT": 29500}, "local rank 2 does not fit a host of 2"),
    ({"RANK": "one", "WORLD_SIZE": 4}, "RANK='one' is not an integer"),
    ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": 2}, "RANK is not set"),
    ({"SLURM_STEP_ID": 0, "SLURM_PROCID": 0, "SLURM_NTASKS": 2, "MASTER_PORT": 29500},
     "MASTER_ADDR is not set"),
])
def test_inconsistent_launcher_variables_are_a_clear_error(variables, message):
    result = run_init(**variables)
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr
    assert "size 1" not in result.stdout


def test_a_process_no_launcher_started_is_a_job_of_one():
    result = run_init()
    assert result.returncode == 0, result.stderr
    assert "size 1 rank 0" in result.stdout


def test_a_size_one_torchrun_job_needs_no_master():
    result = run_init(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, TORCHELASTIC_RUN_ID="x")
    assert result.returncode == 0, result.stderr
    assert "size 1 rank 0" in result.stdout


def test_torchrun_coordinates_name_the_hosts():
    from hora.common.launchers import coordinates
    torchrun = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
                "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "host0", "MASTER_PORT": "29500",
                "TORCHELASTIC_RUN_ID": "r"}
    assert coordinates(torchrun) == ("torchrun", 5, 8, 1, 4, 1, 2, "host0", 29500)
    # Without LOCAL_WORLD_SIZE (a PyTorchJob's pods): one process per host.
    pods = {"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "master", "MASTER_PORT": "23456"}
    assert coordinates(pods) == ("torchrun", 2, 4, 0, 1, 2, 4, "master", 23456)
    # horarun's variables rule.
    assert coordinates(dict(torchrun, HORA_RANK="0")) is None


def test_slurm_coordinates_read_the_tasks_per_node_list():
    from hora.common.launchers import coordinates
    step = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1",
            "SLURM_NODEID": "2", "SLURM_NNODES": "3", "SLURM_TASKS_PER_NODE": "2(x2),3",
            "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    assert coordinates(step) == ("srun", 5, 7, 1, 3, 2, 3, "node0", 29500)
    # Under an MPI launcher's PMI, hora bootstraps through MPI instead, even
    # when the script exports torch's variables too.
    assert coordinates(dict(step, PMI_RANK="5")) is None
    assert coordinates({"OMPI_COMM_WORLD_SIZE": "4", "RANK": "1", "WORLD_SIZE": "4"}) is None
    # The step's own tasks per node come before the allocation's.
    assert coordinates(dict(step, SLURM_STEP_TASKS_PER_NODE="1(x3)", SLURM_NTASKS="3", SLURM_PROCID="2",
                            SLURM_LOCALID="0"))[3:5] == (0, 1)
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE='2\\(x2\\),3' names fewer nodes"):
        coordinates(dict(step, SLURM_NODEID="3", SLURM_NNODES="4"))
