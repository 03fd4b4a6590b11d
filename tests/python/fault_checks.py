"""What the fault-domain tests (numpy and torch) check in their workers'
RESULT lines."""

import json
import re


def results_of(run):
    """{rank: the RESULT json it printed}."""
    results = {}
    for line in run.stdout.splitlines():
        match = re.match(r"^\[(\d+)\]:RESULT (.*)$", line)
        if match:
            results[int(match.group(1))] = json.loads(match.group(2))
    return results


def describe(run):
    return f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"


def assert_untouched(results, baseline, ranks):
    """``ranks`` (the set without the failure) never noticed: no error, and
    the same parameters, bit for bit, as in the run without the failure."""
    for rank in ranks:
        assert "set_failure" not in results[rank], results[rank]
        assert results[rank]["params"] == baseline[rank]["params"]


def assert_regrouped(results, survivors):
    """The survivors made a new set together and summed their ranks on it."""
    for rank in survivors:
        assert results[rank]["survivors_sum"] == float(sum(survivors)), results[rank]
