"""Gluon training with hora.mxnet on 4 ranks, in one horarun job:
broadcast_parameters gives every member the root's values (on the global
set, on [1,2,3], and for parameters initialized later); DistributedTrainer
and DistributedOptimizer on the pairs [0,1] and [2,3] at once with half
batches, and on the global set with quarter batches (also with fp16
compression and grouped allreduces), match one process trained on the whole
batch (workers/training.py)."""

import pytest
from mx_helpers import describe, failed, passed, run_mx_worker

PAIRS = [(0, "pair01"), (1, "pair01"), (2, "pair23"), (3, "pair23")]
EVERY_RANK = [(rank, "global") for rank in range(4)]
EXPECTED = {
    "broadcast_parameters": EVERY_RANK + [(1, "upper"), (2, "upper"), (3, "upper")],
    "broadcast_parameters_deferred": EVERY_RANK,
    "trainer_half_batches": PAIRS,
    "optimizer_half_batches": PAIRS,
    "trainer_quarter_batches": EVERY_RANK,
    "trainer_fp16_groups": EVERY_RANK,
}


@pytest.fixture(scope="module")
def job():
    result = run_mx_worker("training.py")
    assert result.returncode == 0, describe(result)
    assert result.stdout.count("training done failures=0") == 4, describe(result)
    return result


@pytest.mark.parametrize("check", sorted(EXPECTED))
def test_check_passes_on_every_member(job, check):
    assert not failed(job, check), describe(job)
    assert sorted((rank, label) for rank, label, _ in passed(job, check)) == sorted(EXPECTED[check]), describe(job)
