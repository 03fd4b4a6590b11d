"""Keras tasks on process sets (workers/keras_tasks.py, 4 ranks, one job
each): a model trained with DistributedOptimizer(process_set=s) by two ranks
on half batches ends with the weights of one process on the whole batch (to
1e-5), for two tasks training concurrently on disjoint sets, with the
callbacks, gradient aggregation and load_model; and a rank of one task
killed mid-fit fails that task with a HorovodInternalError while the other
task finishes with the weights it reaches alone. The same with Keras 2
(tf_keras, under TF_USE_LEGACY_KERAS=1) on 2 ranks."""

import pytest
from tf_helpers import describe, failed, passed, run_tf_worker

TRAIN_CHECKS = ("same_start", "fit_matches_one_process", "metric_average", "learning_rates", "load_model_rewraps",
                "load_model_continues", "aggregation_matches_one_process", "aggregation_counts_iterations")
KILL_CHECKS = ("same_start", "fit_matches_one_process", "metric_average", "learning_rates")


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    result = run_tf_worker("keras_tasks.py", args=["train", str(tmp_path_factory.mktemp("keras"))])
    assert result.returncode == 0, describe(result)
    return result


@pytest.mark.parametrize("check", TRAIN_CHECKS)
def test_two_tasks_train_concurrently_to_what_one_process_reaches(train, check):
    assert not failed(train, check), describe(train)
    assert sorted((rank, task) for rank, task, _, _ in passed(train, check)) == \
        [(0, "A"), (1, "B"), (2, "A"), (3, "B")], describe(train)


def test_a_rank_killed_mid_fit_fails_only_its_task(tmp_path):
    result = run_tf_worker("keras_tasks.py", args=["kill", str(tmp_path)], launcher_args=["--keep-going"],
                           env={"HORA_OP_TIMEOUT_SECONDS": "5"})
    assert result.returncode != 0, describe(result)
    assert "horarun: rank 1 killed by signal 9" in result.stderr, describe(result)
    for rank in (0, 2, 3):
        assert f"horarun: rank {rank} exited with code 0" in result.stderr, describe(result)
    assert ("[0]:task A failed with PeerFailureError (HorovodInternalError, tf.errors.OpError: True): "
            "PeerFailureError: process set 1 [0, 1] is broken; missing global rank(s) [1]") in result.stdout, \
        describe(result)
    for check in KILL_CHECKS:
        assert sorted(rank for rank, task, _, _ in passed(result, check)) == [2, 3], (check, describe(result))
    assert result.stdout.count("finished B") == 2, describe(result)


def test_keras2_through_tf_keras_matches_one_process():
    result = run_tf_worker("keras2_fit.py", np=2, env={"TF_USE_LEGACY_KERAS": "1"})
    assert result.returncode == 0, describe(result)
    for check in ("fit_matches_one_process", "legacy_optimizer", "aggregation"):
        assert sorted(rank for rank, *_ in passed(result, check)) == [0, 1], (check, describe(result))
