"""Keras in an elastic job (workers/keras_elastic.py): model.fit with
KerasState and the elastic callbacks; a worker killed as an epoch begins,
the survivors go back to the commit at the end of the epoch before and
finish with equal weights."""

import json
import os
import subprocess
import sys

from tf_helpers import WORKERS, describe


def test_keras_fit_resumes_from_the_last_epoch_after_a_worker_dies(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:3\n")
    env = dict(os.environ, HORA_ELASTIC_DISCOVERY_INTERVAL="0.2", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, "-m", "hora.runner", "--min-np", "2", "--max-np", "3",
                          "--elastic-timeout", "60", "--host-discovery-script", f"cat {hosts}", sys.executable,
                          os.path.join(WORKERS, "keras_elastic.py"), str(tmp_path), "5", "--kill", "127.0.0.1:2@2"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, describe(run)
    done = {path.name[:-5]: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}
    assert sorted(done) == ["127.0.0.1:0", "127.0.0.1:1"], describe(run)
    for result in done.values():
        # Epochs 0 and 1 committed at their ends; epoch 2's first allreduce failed.
        assert [(e["round"], e["size"], e["from_epoch"]) for e in result["entries"]] == [(0, 3, 0), (1, 2, 2)]
    assert done["127.0.0.1:0"]["weights"] == done["127.0.0.1:1"]["weights"]
