"""Process sets over shared memory as fault domains, on real processes of
one host: a member SIGKILLed in the middle of ops fails the set on its
survivor within a second, a SIGSTOPped one (the coordinator too) within
1.5 s past the op timeout, each with a PeerFailureError naming it; a member
that raises fails it at once.
After a clean exit, an exception or a SIGKILL, /dev/shm holds none of the
job's segments, and the ranks removed them themselves as soon as the set
was made. A segment left by a rank killed while its set was being made is
removed by horarun, which leaves other jobs' segments alone.
"""

import json
import os
import re

import pytest
from conftest import horarun
from fault_checks import describe, results_of

from hora.runner import shm_leftovers

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")

OP_TIMEOUT_SECONDS = 2
# Past the op timeout, by victim: for a stopped member, the coordinator's
# census of who is missing (a quarter of the timeout); for a stopped
# coordinator, the member's grace before it reports (an eighth of the
# timeout) and its wait for an answer (the same); each plus 1 s for a loaded
# two-core machine.
STOP_SLACK_SECONDS = {1: 1.5, 0: 1.5}


def run_faults(mode, victim, tmp_path):
    run = horarun([os.path.join(WORKERS, "shm_faults.py"), mode, str(victim), str(tmp_path)], np=3,
                  env={"HORA_OP_TIMEOUT_SECONDS": str(OP_TIMEOUT_SECONDS)}, timeout=90,
                  backend="gloo", launcher_args=["--keep-going"])
    match = re.search(r"^\[2\]:SEGMENTS (.*)$", run.stdout, re.MULTILINE)
    assert match, describe(run)
    records = json.loads(match.group(1))
    return run, results_of(run), records


def assert_no_segment_left(run, results, records, members):
    """Both sets ran over shared memory; their members removed the names by
    themselves (right after A was made), and nothing is in /dev/shm now."""
    for key, record in records.items():
        assert not record.startswith("-"), f"{key}: the set took the network path: {record}"
        name = record.split(" ")[0]
        assert not os.path.exists(os.path.join("/dev/shm", name)), f"{name} of {key} is left in /dev/shm"
    for rank in members:
        assert results[rank]["segment_gone_after_first_op"], results[rank]
    assert "horarun: removed" not in run.stderr, describe(run)


def test_a_clean_run_leaves_nothing_in_dev_shm(tmp_path):
    run, results, records = run_faults("none", 1, tmp_path)
    assert run.returncode == 0, describe(run)
    assert_no_segment_left(run, results, records, (0, 1))


@pytest.mark.parametrize("victim", [1, 0], ids=["member", "coordinator"])
def test_a_killed_member_fails_the_set_within_a_second(victim, tmp_path):
    run, results, records = run_faults("kill", victim, tmp_path)
    assert f"horarun: rank {victim} killed by signal 9" in run.stderr, describe(run)
    failure = results[1 - victim]["set_failure"]
    assert f"process set 1 [0, 1] is broken; missing global rank(s) [{victim}]" in failure["message"], failure
    assert failure["after_event_seconds"] < 1.0, failure
    assert_no_segment_left(run, results, records, (1 - victim,))


@pytest.mark.parametrize("victim", [1, 0], ids=["member", "coordinator"])
def test_a_stopped_member_fails_the_set_after_the_op_timeout_and_the_verdict(victim, tmp_path):
    run, results, records = run_faults("stop", victim, tmp_path)
    survivor = 1 - victim
    failure = results[survivor]["set_failure"]
    assert f"process set 1 [0, 1] is broken; missing global rank(s) [{victim}]" in failure["message"], failure
    assert failure["after_event_seconds"] < OP_TIMEOUT_SECONDS + STOP_SLACK_SECONDS[victim], failure
    # Resumed, the victim finds the set broken instead of hanging.
    assert f"horarun: rank {victim} exited with code 3" in run.stderr, describe(run)
    assert "process set 1 [0, 1] is broken" in results[victim]["set_failure"]["message"], results[victim]
    assert_no_segment_left(run, results, records, (0, 1))


def test_an_exception_in_a_member_fails_the_set_at_once(tmp_path):
    run, results, records = run_faults("raise", 1, tmp_path)
    assert "horarun: rank 1 exited with code 1" in run.stderr, describe(run)
    failure = results[0]["set_failure"]
    assert "process set 1 [0, 1] is broken; missing global rank(s) [1]" in failure["message"], failure
    assert failure["after_event_seconds"] < 1.0, failure
    assert_no_segment_left(run, results, records, (0,))


def test_horarun_removes_a_segment_left_by_a_rank_killed_while_making_its_set(tmp_path):
    run = horarun([os.path.join(WORKERS, "shm_leftover.py"), str(tmp_path)], np=3, timeout=60, backend="gloo")
    result = results_of(run)[1]
    other_job = os.path.join("/dev/shm", result["other_job"])
    try:
        assert run.returncode == 128 + 9, describe(run)
        assert result["present_when_killed"], result
        assert not os.path.exists(os.path.join("/dev/shm", result["segment"])), describe(run)
        assert f"horarun: removed 1 shared-memory segment(s) the job left in /dev/shm: {result['segment']}" \
            in run.stderr, describe(run)
        # A name the job never recorded (another job's segment) stays.
        assert os.path.exists(other_job)
    finally:
        if os.path.exists(other_job):
            os.unlink(other_job)


def test_only_recorded_names_of_this_users_regular_files_are_removed(tmp_path):
    uid = os.geteuid()
    name = f"hora-{uid}-" + "a" * 32
    link, folder = f"hora-{uid}-" + "b" * 32, f"hora-{uid}-" + "c" * 32
    records = [f"{name} 4096".encode(), f"{link} 4096".encode(), f"{folder} 4096".encode(),
               b"-no room in /dev/shm", f"hora-{uid + 1}-{'d' * 32} 4096".encode(), b"../etc/passwd 1"]
    assert shm_leftovers.recorded_segment_names(records) == [name, link, folder]
    (tmp_path / name).write_bytes(b"x")
    target = tmp_path / "target"
    target.write_bytes(b"y")
    (tmp_path / link).symlink_to(target)
    (tmp_path / folder).mkdir()
    removed = shm_leftovers.remove_segments([name, link, folder, f"hora-{uid}-" + "e" * 32], directory=tmp_path)
    assert removed == [name]
    assert (tmp_path / link).is_symlink() and target.read_bytes() == b"y"
    assert (tmp_path / folder).is_dir()
