"""hora.torch tasks as fault domains, on 4 processes under horarun
--keep-going (Gloo: under mpirun a dead rank ends the whole job): rank 1 of
task A dies in the middle of a DistributedOptimizer step; A's survivor gets
a HorovodInternalError naming the set and the rank, task B ends with exactly
the parameters of a run without the failure, and the survivors of both make
a new set together."""

import os

import pytest
from fault_checks import assert_regrouped, assert_untouched, describe, results_of
from helpers import WORKERS, horarun

OP_TIMEOUT_SECONDS = 3
SLACK_SECONDS = 20


def run(mode, outdir):
    result = horarun([os.path.join(WORKERS, "fault_domains.py"), mode, str(outdir)], backend="gloo",
                     launcher_args=["--keep-going"], env={"HORA_OP_TIMEOUT_SECONDS": str(OP_TIMEOUT_SECONDS)})
    return result, results_of(result)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    result, results = run("none", tmp_path_factory.mktemp("baseline"))
    assert result.returncode == 0, describe(result)
    assert sorted(results) == [0, 1, 2, 3], describe(result)
    return results


def test_a_rank_killed_mid_step_fails_only_its_task(baseline, tmp_path):
    result, results = run("kill", tmp_path)
    assert result.returncode != 0, describe(result)
    assert "horarun: rank 1 killed by signal 9" in result.stderr, describe(result)
    for rank in (0, 2, 3):
        assert f"horarun: rank {rank} exited with code 0" in result.stderr, describe(result)

    failure = results[0]["set_failure"]
    assert failure["type"] == "PeerFailureError", failure
    assert "process set 1 [0, 1] is broken; missing global rank(s) [1]" in failure["message"], failure
    assert failure["after_event_seconds"] < OP_TIMEOUT_SECONDS + SLACK_SECONDS, failure
    assert results[0]["removed"] is True
    assert_untouched(results, baseline, (2, 3))
    assert_regrouped(results, (0, 2, 3))
