"""hora.torch's collectives, gradients, optimizer, functions and join: worker
parts on 4 ranks through horarun."""

import pytest
from helpers import run_torch_worker

# Every test here runs under each backend this build has (Gloo, and MPI when built).
pytestmark = pytest.mark.usefixtures("backend")


def test_collectives_and_their_gradients_on_every_set():
    result = run_torch_worker("parts.py", args=["collectives", "gradients"])
    for label, count in (("global", 4), ("even", 2), ("odd", 2), ("upper", 3)):
        assert result.stdout.count(f"set {label} ok") == count, result.stdout
    assert result.stdout.count("gradients ok") == 4 + 2 + 2 + 3, result.stdout
    assert result.stdout.count("parts done") == 4, result.stdout


def test_optimizer_functions_and_join_on_sets():
    result = run_torch_worker("parts.py", args=["training", "functions", "join"])
    for stage in ("equivalence", "options", "sparse", "buckets", "synchronize", "two tasks", "global join", "uneven batches",
                  "join twice", "numpy join", "set join"):
        assert result.stdout.count(f"{stage} ok") == 4, (stage, result.stdout)
    # broadcasts, objects and SyncBatchNorm on the global set and [0,2], [1,3], [1,2,3]
    assert sum(result.stdout.count(f"set {ranks} ok") for ranks in
               ("[0, 1, 2, 3]", "[0, 2]", "[1, 3]", "[1, 2, 3]")) == 4 + 2 + 2 + 3, result.stdout
    assert result.stdout.count("parts done") == 4, result.stdout


def test_async_ops_do_not_wait_for_a_late_member_and_adasum():
    # A hang would otherwise last the default op timeout.
    result = run_torch_worker("parts.py", args=["async_ops", "adasum"], env={"HORA_OP_TIMEOUT_SECONDS": "60"})
    for stage in ("async", "adasum allreduce", "adasum optimizer"):
        assert result.stdout.count(f"{stage} ok") == 4, (stage, result.stdout)
    assert result.stdout.count("parts done") == 4, result.stdout
