"""The hora-horovod package runs horovod.mxnet scripts unchanged on hora."""

import os
import subprocess
import sys

from mx_helpers import REPO, WORKERS, describe, run_mx_worker


def test_a_horovod_mxnet_script_runs_unchanged(shim_site):
    path = os.pathsep.join([str(shim_site), WORKERS, os.environ.get("PYTHONPATH", "")])
    result = run_mx_worker("horovod_mx_script.py", np=2, env={"PYTHONPATH": path})
    assert result.returncode == 0, describe(result)
    assert result.stdout.count(f"with horovod from {shim_site}") == 2, describe(result)
    assert result.stdout.count("total 2, same weights True") == 2, describe(result)


def test_shim_modules_are_hora_modules(shim_site):
    code = ("import horovod.mxnet as hvd, hora.mxnet, horovod.mxnet.mpi_ops as m;"
            "from horovod.mxnet.functions import broadcast_object;"
            "from horovod.mxnet.compression import Compression;"
            "assert hvd.allreduce is hora.mxnet.allreduce is m.allreduce and m.Sum == 1;"
            "assert hvd.DistributedTrainer is hora.mxnet.DistributedTrainer;"
            "assert broadcast_object is hvd.broadcast_object and Compression is hvd.Compression;"
            "hvd.init(); assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: [0]};"
            "assert m._basics.rank() == 0; print('ok')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim_site), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.stdout.strip() == "ok", result.stderr
