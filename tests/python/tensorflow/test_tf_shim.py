"""The hora-horovod package runs horovod.tensorflow, horovod.tensorflow.keras
and horovod.keras scripts unchanged on hora."""

import os
import subprocess
import sys

from tf_helpers import REPO, WORKERS, describe, run_tf_worker


def test_a_horovod_tensorflow_and_keras_script_runs_unchanged(shim_site):
    path = os.pathsep.join([str(shim_site), WORKERS, os.environ.get("PYTHONPATH", "")])
    result = run_tf_worker("horovod_tf_script.py", np=2, env={"PYTHONPATH": path})
    assert result.returncode == 0, describe(result)
    assert result.stdout.count(f"with horovod from {shim_site}") == 2, describe(result)
    assert result.stdout.count("total 3, same weights True") == 2, describe(result)


def test_shim_modules_are_hora_modules(shim_site):
    code = ("import horovod.tensorflow as hvd, horovod.tensorflow.keras as k, horovod.keras as k2, hora.tensorflow,"
            " hora.tensorflow.keras, horovod.tensorflow.mpi_ops as m, horovod.tensorflow.util as u;"
            "from horovod.tensorflow.keras.callbacks import MetricAverageCallback;"
            "from horovod.tensorflow.functions import broadcast_object;"
            "assert hvd.allreduce is hora.tensorflow.allreduce and m.Sum == 1 and u._executing_eagerly();"
            "assert k.DistributedOptimizer is hora.tensorflow.keras.DistributedOptimizer is k2.DistributedOptimizer;"
            "assert MetricAverageCallback is k.callbacks.MetricAverageCallback;"
            "assert broadcast_object is hvd.broadcast_object;"
            "hvd.init(); assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: [0]};"
            "assert m._basics.rank() == 0; print('ok')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim_site), os.environ.get("PYTHONPATH", "")]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.stdout.strip() == "ok", result.stderr
