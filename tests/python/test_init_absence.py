"""A rank that never calls hvd.init(): the ranks waiting for it name it, say
whether its process is alive or how it ended (horarun publishes that in
the job's store), warn while they wait, and horarun's summary names it as
the cause instead of the rank that timed out waiting for it."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from hora.runner import failures

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "absent_init.py")
# Short waits: a warning after 1 s, the error after 3 s.
SHORT_WAITS = {"HORA_START_TIMEOUT": "3", "HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "OMP_NUM_THREADS": "1"}


def horarun(*args, np=2, timeout=60):
    cmd = [sys.executable, "-m", "hora.runner", *args[:-1], "-np", str(np), sys.executable, *args[-1]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **SHORT_WAITS))


def describe(run):
    return f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"


def summary_of(run):
    return [line[len("horarun: "):] for line in run.stderr.splitlines() if line.startswith("horarun: ")]


ERROR = re.compile(r"^\[0\]:hora\.[\w.]*(?:TimeoutError|PeerFailureError): process set 0 \[0, 1\]: (.*)$",
                   re.MULTILINE)


def test_a_sleeping_rank_is_named_alive_and_blamed():
    start = time.monotonic()
    run = horarun([WORKER, "sleep"])
    # horarun stops rank 1 a second after rank 0 fails, without waiting its 60 s.
    assert time.monotonic() - start < 30, describe(run)
    assert run.returncode == 1, describe(run)
    error = ERROR.search(run.stderr)
    assert error, describe(run)
    assert error.group(1) == ("global rank 1 has not called hvd.init() after 3 s (its process is alive) "
                              "(HORA_START_TIMEOUT)"), describe(run)
    # Warned while it waited.
    assert "[0]:hora: WARNING: process set 0 [0, 1]: global rank 1 has not called hvd.init() after 1 s " \
           "(its process is alive)" in run.stderr, describe(run)
    summary = summary_of(run)
    assert summary[-1] == ("no rank failed on its own: rank 1 had not called hvd.init() when rank 0 gave up "
                           "waiting for it (still running; stopped by horarun)"), describe(run)
    assert any(line.startswith("rank 0 failed because of rank 1: ") and "TimeoutError" in line for line in summary), \
        describe(run)
    # Rank 0, which only waited, is not called the first to fail.
    assert not any("rank 0 exited" in line or "rank 0 failed first" in line for line in summary), describe(run)


def test_a_rank_that_exited_before_init_is_named_with_its_exit_code():
    run = horarun("--keep-going", [WORKER, "exit"])
    assert run.returncode == 3, describe(run)
    error = ERROR.search(run.stderr)
    assert error, describe(run)
    # Its process ended, so rank 0 does not wait out the start timeout for it.
    assert re.fullmatch(r"global rank 1 has not called hvd\.init\(\) after [\d.]+ s \(its process exited with "
                        r"code 3\); it never will", error.group(1)), describe(run)
    summary = summary_of(run)
    assert "rank 0 exited with code 1: PeerFailureError because of rank 1 (in process set 0 [0, 1])" in summary, \
        describe(run)
    assert "rank 1 exited with code 3 before calling hvd.init(): the first rank to fail (in process set 0 [0, 1])" \
        in summary, describe(run)
    assert summary[-1] == "rank 1 exited with code 3 before calling hvd.init() (the first rank to fail)", describe(run)


def test_horarun_publishes_that_it_watches_and_how_each_rank_ended():
    # Rank 1 exits with 5; rank 0 reads what horarun wrote about it.
    source = textwrap.dedent("""
        import os, sys
        from hora.runner.rendezvous import RendezvousClient
        if os.environ["HORA_RANK"] == "1":
            sys.exit(5)
        with RendezvousClient(os.environ["HORA_RENDEZVOUS_ADDR"], os.environ["HORA_RENDEZVOUS_PORT"],
                              os.environ["HORA_SECRET"]) as store:
            print("watch", store.get("hora.launcher.watch", timeout=10).decode())
            print("rank 1", store.get("hora.process.1", timeout=10).decode())
    """)
    run = horarun("--keep-going", ["-c", source])
    assert run.returncode == 5, describe(run)
    assert "[0]:watch 1" in run.stdout.splitlines(), describe(run)
    assert "[0]:rank 1 exited with code 5" in run.stdout.splitlines(), describe(run)


# --- the classification, on made-up outcomes --------------------------------

TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "    hvd.init()"]


def outcome(rank, code, exited_at, lines=(), signalled_at=None):
    tail = failures.StderrTail()
    for line in lines:
        tail.add(line.encode() + b"\n", exited_at)
    return failures.RankOutcome(rank, code, exited_at, signalled_at, tail)


def test_absent_members_of_a_set_are_the_cause_and_a_killed_one_is_named_with_its_signal():
    error = ("hora.errors.TimeoutError: process set 3 [0, 2, 3]: global rank 2 has not called "
             "add_process_set([0, 2, 3]) after 600 s (its process killed by signal 9 (SIGKILL)); global rank 3 has "
             "not called add_process_set([0, 2, 3]) after 600 s (its process is alive) (HORA_OP_TIMEOUT_SECONDS)")
    summary = failures.Summary([
        outcome(0, 1, 5.0, TRACEBACK + [error]), outcome(1, 0, 6.0),
        outcome(2, -9, 1.0), outcome(3, -15, 7.0, signalled_at=6.5)])
    assert summary.not_called(2) == ("add_process_set([0, 2, 3])", True)
    assert summary.not_called(3) == ("add_process_set([0, 2, 3])", False)
    lines = summary.lines(keep_going=True)
    assert lines[-1] == ("rank 2 killed by signal 9 (SIGKILL) before calling add_process_set([0, 2, 3]) "
                         "(the first rank to fail)")
    assert ("rank 0 exited with code 1: TimeoutError because of ranks 2, 3 (in process set 3 [0, 2, 3])"
            in lines)
    assert summary.exit_status() == 128 + 9


def test_the_start_timeout_variable_is_horaruns_default(monkeypatch):
    from hora.runner import launch

    monkeypatch.delenv("HOROVOD_START_TIMEOUT", raising=False)
    monkeypatch.setenv("HORA_START_TIMEOUT", "7")
    assert launch.parse_args(["-np", "1", "x"], raise_errors=True).start_timeout == 7
    assert launch.parse_args(["--start-timeout", "9", "-np", "1", "x"], raise_errors=True).start_timeout == 9
    monkeypatch.setenv("HORA_START_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=re.escape("HORA_START_TIMEOUT='soon' is not a number of seconds")):
        launch.parse_args(["-np", "1", "x"], raise_errors=True)
