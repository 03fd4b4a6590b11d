"""Ranks that wait on different ops are reported as diverged: the stall
warning (sooner than for a merely slow rank) and the final error name the op
each rank waits on, and call no live rank missing. Those ops fail alone: the
set runs the ops the ranks agree on next. Short limits set here;
docs/fault_tolerance.md gives the defaults."""

import os
import subprocess
import sys

import pytest
from fault_checks import describe, results_of

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "diverge.py")
REPO = os.path.dirname(os.path.dirname(HERE))

OP_TIMEOUT_SECONDS = 4
LIMITS = {"HORA_OP_TIMEOUT_SECONDS": str(OP_TIMEOUT_SECONDS), "HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}


def run_diverged(mode, np, limits=LIMITS):
    cmd = [sys.executable, "-m", "hora.runner", "--keep-going", "-np", str(np), sys.executable, WORKER, mode]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=dict(os.environ, **limits))
    assert run.returncode == 0, describe(run)
    results = results_of(run)
    assert sorted(results) == list(range(np)), describe(run)
    return run, results


def expected_waits(mode, np):
    """{global rank: the op it waits on, as the reports name it}."""
    if mode == "typo":
        return {r: f"allreduce '{'Loss' if r == np - 1 else 'loss'}' (float32 [4])" for r in range(np)}
    return {r: "broadcast 'state' (int64 [3])" if r == 0 else "allreduce 'grad' (float32 [4])" for r in range(np)}


def assert_the_set_goes_on(results, np):
    total = sum(range(1, np + 1))
    for rank in range(np):
        assert results[rank]["error_type"] == "MismatchError", results[rank]
        assert results[rank]["after"] == [total, total], results[rank]


@pytest.mark.parametrize("np", [2, 4])
@pytest.mark.parametrize("mode", ["typo", "kinds"])
def test_diverged_ranks_are_named_with_the_op_each_waits_on_and_the_set_goes_on(mode, np):
    run, results = run_diverged(mode, np)
    set_text = f"process set 0 {list(range(np))}"
    waits = expected_waits(mode, np)

    warning = "\n".join(line for line in run.stderr.splitlines() if line.startswith("[0]:"))
    assert f"hora: WARNING: {set_text}: the ranks diverged" in warning, describe(run)
    for rank, op in waits.items():
        assert f"global rank {rank} waits on {op}" in warning, describe(run)
    assert "has not submitted" not in warning, describe(run)

    for rank in range(np):
        error = results[rank]["error"]
        assert error is not None, results[rank]
        assert f"{waits[rank]} on {set_text} failed: the ranks diverged" in error, error
        assert f"within {OP_TIMEOUT_SECONDS} s (HORA_OP_TIMEOUT_SECONDS)" in error, error
        for other, op in waits.items():
            assert f"global rank {other} waits on {op}" in error, error
        assert "missing" not in error, error
    assert_the_set_goes_on(results, np)


def test_ops_of_diverged_ranks_that_stay_so_fail_at_the_divergence_timeout():
    # The op timeout is ten minutes: nothing but the divergence timeout can
    # end this within the test's two.
    limits = {"HORA_OP_TIMEOUT_SECONDS": "600", "HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
              "HORA_DIVERGENCE_TIMEOUT_SECONDS": "2"}
    run, results = run_diverged("typo", 2, limits)
    for rank in range(2):
        error = results[rank]["error"]
        assert error is not None, results[rank]
        assert (f"{expected_waits('typo', 2)[rank]} on process set 0 [0, 1] failed: the ranks diverged: each waits on "
                "an op the others have not submitted, and nothing was submitted or finished for 2") in error, error
        assert "(HORA_DIVERGENCE_TIMEOUT_SECONDS: 2 s)" in error, error
        assert "global rank 1 waits on allreduce 'Loss' (float32 [4])" in error, error
    assert_the_set_goes_on(results, 2)
