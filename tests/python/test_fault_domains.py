"""Process sets as fault domains, on 4 real processes: a rank killed or hung
mid-training fails only the sets that contain it, with a PeerFailureError
naming the set and the rank, within the op timeout; the other set finishes
with exactly the parameters of a run without the failure; horarun
--keep-going lets the survivors finish and reports every rank's status.
Also the stall inspector's warning and shutdown. Timing is asserted only as
"within the op timeout plus slack"; benchmarks/fault_domains.py measures it.
"""

import json
import os
import subprocess
import sys

import pytest
from fault_checks import assert_regrouped, assert_untouched, describe, results_of

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
REPO = os.path.dirname(os.path.dirname(HERE))

OP_TIMEOUT_SECONDS = 3
# The coordinator's census window and a member's wait for the verdict, plus
# a slow machine.
SLACK_SECONDS = 20


def horarun(worker, args, env=None, keep_going=True, np=4, timeout=180):
    cmd = [sys.executable, "-m", "hora.runner"] + (["--keep-going"] if keep_going else [])
    cmd += ["-np", str(np), sys.executable, os.path.join(WORKERS, worker)] + [str(a) for a in args]
    full_env = dict(os.environ, HORA_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_SECONDS))
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


def run_training(mode, outdir):
    run = horarun("fault_domains.py", [mode, outdir])
    return run, results_of(run)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """Both sets train to the end; nobody fails."""
    run, results = run_training("none", tmp_path_factory.mktemp("baseline"))
    assert run.returncode == 0, describe(run)
    assert "horarun: rank 3 exited with code 0" in run.stderr, describe(run)
    assert sorted(results) == [0, 1, 2, 3], describe(run)
    return results


def assert_status_report(run, statuses):
    for rank, status in statuses.items():
        assert f"horarun: rank {rank} {status}" in run.stderr, describe(run)


def assert_failed_within_timeout(failure, set_text, missing):
    assert f"{set_text} is broken; missing global rank(s) {missing}" in failure["message"], failure
    assert failure["after_event_seconds"] < OP_TIMEOUT_SECONDS + SLACK_SECONDS, failure


@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_a_dead_or_hung_rank_fails_only_its_set(mode, baseline, tmp_path):
    run, results = run_training(mode, tmp_path)
    # --keep-going: the others ran to the end; horarun fails and says who did.
    assert run.returncode != 0, describe(run)
    rank1 = "killed by signal 9" if mode == "kill" else "exited with code 3"
    assert_status_report(run, {0: "exited with code 0", 1: rank1, 2: "exited with code 0", 3: "exited with code 0"})

    # Rank 0 gets a PeerFailure naming set A and rank 1, within the timeout.
    failure = results[0]["set_failure"]
    assert_failed_within_timeout(failure, "process set 1 [0, 1]", "[1]")
    if mode == "kill":
        assert "control connection to global rank 1 closed" in failure["message"], failure
    else:
        assert f"did not submit 'grad' within {OP_TIMEOUT_SECONDS} s" in failure["message"], failure
        # Resumed, rank 1 finds that A moved on without it.
        assert "process set 1 [0, 1] is broken" in results[1]["set_failure"]["message"], results[1]
    assert results[0]["removed"] is True

    assert_untouched(results, baseline, (2, 3))
    assert_regrouped(results, (0, 2, 3))


def test_a_rank_in_a_and_the_global_set_keeps_a_working_when_the_global_set_fails(baseline, tmp_path):
    # Rank 3 (in B and the global set) dies; ranks 0 and 1 are in A and the
    # global set.
    run, results = run_training("kill-outsider", tmp_path)
    assert run.returncode != 0, describe(run)
    assert_status_report(run, {0: "exited with code 0", 1: "exited with code 0", 3: "killed by signal 9"})
    for rank in (0, 1):
        assert_failed_within_timeout(results[rank]["global"], "process set 0 [0, 1, 2, 3]", "[3]")
        assert results[rank]["params"] == baseline[rank]["params"]
        assert results[rank]["survivors_sum"] == 3.0
    assert_failed_within_timeout(results[2]["set_failure"], "process set 2 [2, 3]", "[3]")


def test_without_keep_going_the_first_failure_still_stops_the_job(tmp_path):
    run = horarun("fault_domains.py", ["kill", tmp_path], keep_going=False)
    assert run.returncode == 128 + 9, describe(run)
    assert "horarun: rank 1 killed by signal 9" in run.stderr, describe(run)
    assert "horarun: rank 0 exited" not in run.stderr, describe(run)


def test_keep_going_reports_every_rank_and_exits_with_the_first_failure():
    script = ("import os, sys, time\n"
              "rank = int(os.environ['HORA_RANK'])\n"
              "time.sleep(0.5 * (rank != 1))\n"
              "print('finished', flush=True)\n"
              "sys.exit(7 if rank == 1 else 0)\n")
    cmd = [sys.executable, "-m", "hora.runner", "--keep-going", "-np", "3", sys.executable, "-c", script]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 7, describe(run)
    for rank in range(3):
        assert f"[{rank}]:finished" in run.stdout, describe(run)
    assert_status_report(run, {0: "exited with code 0", 1: "exited with code 7", 2: "exited with code 0"})


def test_stall_warning_names_the_tensor_and_the_missing_rank(tmp_path):
    # Rank 1 is 2.5 s late: an op timeout well above that, so that a slow
    # start on a busy machine does not turn lateness into a failure.
    run = horarun("stall.py", ["late", tmp_path],
                  env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HORA_OP_TIMEOUT_SECONDS": "10"}, keep_going=False)
    assert run.returncode == 0, describe(run)
    results = results_of(run)
    assert results[0]["sum"] == results[1]["sum"] == 2.0
    warnings = [line for line in run.stderr.splitlines() if line.startswith("[0]:")]
    text = "\n".join(warnings)
    assert "hora: WARNING: process set 1 [0, 1]" in text, describe(run)
    assert "global rank 1 has not submitted 'lonely'" in text, describe(run)
    # Only the set's coordinator warns, and nobody warns about other sets.
    assert "WARNING" not in "".join(line for line in run.stderr.splitlines() if not line.startswith("[0]:"))


def test_stall_shutdown_time_turns_the_stall_into_an_error_on_every_member(tmp_path):
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "0.5", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "1.5"}
    run = horarun("stall.py", ["never", tmp_path], env=env, keep_going=False)
    assert run.returncode == 0, describe(run)
    results = results_of(run)
    for rank in (0, 1):
        message = results[rank]["error"]
        assert "process set 1 [0, 1] is broken; missing global rank(s) [1]" in message, message
        assert "'lonely' within 1.5 s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)" in message, message


def test_a_set_with_a_member_the_launcher_saw_die_fails_at_once():
    # The op timeout is a minute: the failure must come from what horarun
    # knows of rank 3's process, not from waiting it out.
    run = horarun("dead_member.py", [], env={"HORA_OP_TIMEOUT_SECONDS": "60"}, timeout=120)
    lines = [line for line in run.stdout.splitlines() if '"DEAD_MEMBER"' in line]
    assert len(lines) == 1, describe(run)
    outcome = json.loads(lines[0].split(":", 1)[1])["DEAD_MEMBER"]
    assert outcome["error"] == "PeerFailureError", outcome
    assert ("global rank 3 has not called add_process_set([0, 3]) after" in outcome["message"]
            and "(its process killed by signal 9 (SIGKILL)); it never will" in outcome["message"]), outcome
    assert outcome["seconds"] < 60, outcome
