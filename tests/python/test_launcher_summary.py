"""horarun's report of a failed job: the rank that failed first (by its own
error, not by whoever exited first), its status and the end of its stderr;
the ranks that failed because of it; with --keep-going, each failed rank's
process set."""

import os
import re
import subprocess
import sys
import time

from hora.runner import failures

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
CRASH = os.path.join(WORKERS, "crash_mid_training.py")


def horarun(*args, np=4, timeout=60):
    cmd = [sys.executable, "-m", "hora.runner", *args[:-1], "-np", str(np), sys.executable, *args[-1]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def describe(run):
    return f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"


def summary_of(run):
    """horarun's own lines at the end of stderr."""
    return [line[len("horarun: "):] for line in run.stderr.splitlines() if line.startswith("horarun: ")]


def test_the_crashing_rank_is_named_every_time():
    # Ten jobs in a row; the crashing rank goes round the four, so the
    # coordinator of the global set (rank 0) crashes too.
    start = time.monotonic()
    for attempt in range(10):
        crash = attempt % 4
        run = horarun([CRASH, str(crash)])
        assert run.returncode == 1, describe(run)
        summary = summary_of(run)
        error = f"RuntimeError: rank {crash}: loss is NaN at step 5"
        others = ", ".join(str(r) for r in range(4) if r != crash)
        assert summary[-1] == f"rank {crash} exited with code 1 (the first rank to fail): {error}", describe(run)
        assert f"rank {crash} failed first; the last 4 lines of its stderr:" in summary, describe(run)
        assert f"    {error}" in summary, describe(run)
        because = [line for line in summary if line.startswith(f"ranks {others} failed because of rank {crash}: ")]
        assert len(because) == 1 and "PeerFailureError: process set 0 [0, 1, 2, 3] is broken" in because[0], \
            describe(run)
        # No survivor is reported as a failure of its own.
        assert not any(re.match(r"rank \d exited", line) for line in summary[:-1]), describe(run)
    # Each job takes well under a second here; ten must not add up to minutes.
    assert time.monotonic() - start < 40


def test_keep_going_names_each_failed_ranks_process_set():
    run = horarun("--keep-going", [CRASH, "1", "sets"])
    assert run.returncode == 1, describe(run)
    summary = summary_of(run)
    assert "rank 1 exited with code 1: the first rank to fail (in process set 1 [0, 1])" in summary, describe(run)
    assert "rank 0 exited with code 1: PeerFailureError because of rank 1 (in process set 1 [0, 1])" in summary, \
        describe(run)
    assert "rank 2 exited with code 0" in summary and "rank 3 exited with code 0" in summary, describe(run)
    assert "[2]:done" in run.stdout and "[3]:done" in run.stdout, describe(run)
    assert summary[-1] == "rank 1 exited with code 1 (the first rank to fail): RuntimeError: rank 1: loss is NaN " \
                          "at step 5", describe(run)


# --- the classification, on outcomes made up in the order that fools timing --

TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             "    step()"]
PEER = ("hora.errors.PeerFailureError: process set {set} is broken; missing global rank(s) [{missing}]: "
        "the control connection to global rank {missing} closed")


def outcome(rank, code, exited_at, lines=(), read_at=None, signalled_at=None, host=None):
    tail = failures.StderrTail()
    for line in lines:
        tail.add(line.encode() + b"\n", exited_at if read_at is None else read_at)
    return failures.RankOutcome(rank, code, exited_at, signalled_at, tail, host)


def peer_failure(rank, exited_at, missing, set_text="0 [0, 1, 2, 3]"):
    return outcome(rank, 1, exited_at, TRACEBACK + [PEER.format(set=set_text, missing=missing)])


def test_a_survivor_that_exits_first_is_not_the_cause():
    # Rank 0 exits (PeerFailureError) before rank 2, whose traceback it
    # caused, has finished its shutdown.
    summary = failures.Summary([
        peer_failure(0, 1.0, 2), peer_failure(1, 1.1, 2), peer_failure(3, 1.2, 2),
        outcome(2, 1, 1.5, TRACEBACK + ["ValueError: bad shape"], read_at=0.9)])
    lines = summary.lines(keep_going=False)
    assert lines[-1] == "rank 2 exited with code 1 (the first rank to fail): ValueError: bad shape"
    assert lines[0] == "rank 2 failed first; the last 4 lines of its stderr:"
    assert lines[1:5] == ["    " + line for line in TRACEBACK + ["ValueError: bad shape"]]
    assert lines[5].startswith("ranks 0, 1, 3 failed because of rank 2: hora.errors.PeerFailureError: process set 0")
    assert summary.exit_status() == 1


def test_a_signal_is_named_and_the_earliest_of_two_causes_wins():
    summary = failures.Summary([
        outcome(1, -9, 2.0, ["loading data"]),
        outcome(3, 1, 2.5, TRACEBACK + ["ValueError: late"], read_at=2.4),
        peer_failure(0, 2.1, 1)])
    lines = summary.lines(keep_going=False)
    assert lines[-1] == "rank 1 killed by signal 9 (SIGKILL) (the first rank to fail)"
    assert "rank 3 also failed: exited with code 1: ValueError: late" in lines
    assert summary.exit_status() == 128 + 9


def test_identical_errors_are_folded_and_stopped_ranks_listed():
    mismatch = TRACEBACK + ["hora.errors.MismatchError: process set 0: ranks disagree on the shape"]
    summary = failures.Summary([
        outcome(0, 1, 1.0, mismatch, read_at=0.5), outcome(1, 1, 1.0, mismatch, read_at=0.6),
        outcome(2, 1, 1.0, mismatch, read_at=0.7), outcome(3, -15, 2.0, signalled_at=1.9)])
    lines = summary.lines(keep_going=False)
    assert "ranks 1, 2 failed with the same error" in lines
    assert "rank 3 stopped by horarun after the failure" in lines
    assert lines[-1].startswith("rank 0 exited with code 1 (the first rank to fail): hora.errors.MismatchError")


def test_a_hung_rank_named_by_the_others_is_reported():
    # Nobody failed on its own: rank 1 hung, the others timed out on it, and
    # horarun stopped it.
    summary = failures.Summary([
        peer_failure(0, 5.0, 1, "1 [0, 1]"), outcome(1, -15, 7.0, signalled_at=6.0),
        outcome(2, 0, 8.0), outcome(3, 0, 8.0)])
    lines = summary.lines(keep_going=True)
    assert lines[-1] == ("no rank failed on its own: the others' PeerFailureError names rank 1 (still running; "
                         "stopped by horarun); it may have hung, ended early or run different code")
    assert "rank 0 exited with code 1: PeerFailureError because of rank 1 (in process set 1 [0, 1])" in lines
    assert "rank 1 killed by signal 15 (SIGTERM): stopped by horarun" in lines
    assert summary.exit_status() == 1


def test_only_the_last_lines_of_a_long_stderr_are_shown():
    lines = [f"line {i}" for i in range(500)] + ["RuntimeError: the end"]
    summary = failures.Summary([outcome(0, 1, 1.0, lines)])
    shown = summary.lines(keep_going=False)
    assert shown[0] == "rank 0 failed first; the last 20 lines of its stderr:"
    assert shown[1:21] == ["    " + line for line in lines[-20:]]
    tail = failures.StderrTail()
    tail.add(b"x" * 10000 + b"\n", 0.0)
    assert len(tail.lines[0][1]) < 2100


def test_an_error_raised_from_a_peer_failure_is_a_consequence():
    chained = (TRACEBACK + [PEER.format(set="1 [0, 1]", missing=1), "",
                            "The above exception was the direct cause of the following exception:", ""]
               + TRACEBACK + ["RuntimeError: training failed"])
    summary = failures.Summary([outcome(0, 1, 1.0, chained, read_at=0.5),
                                outcome(1, 1, 1.5, TRACEBACK + ["OSError: disk full"], read_at=0.8)])
    lines = summary.lines(keep_going=False)
    assert lines[-1] == "rank 1 exited with code 1 (the first rank to fail): OSError: disk full"
    assert lines[-2].startswith("rank 0 failed because of rank 1: hora.errors.PeerFailureError: process set 1")


# --- hosts: a link cut, a host's ranks killed ---------------------------------

UNREACHABLE = ("hora.errors.PeerFailureError: process set 0 [0, 1, 2, 3, 4, 5] is broken; missing global rank(s) "
               "[{missing}]: global rank {missing} is unreachable: no answer from 10.0.0.{host} for 3 s "
               "(HORA_LINK_TIMEOUT_SECONDS): its host is down or the network to it is cut")
COORDINATOR_UNREACHABLE = ("hora.errors.PeerFailureError: process set 0 [0, 1, 2, 3, 4, 5] is broken; missing "
                           "global rank(s) [0]: the coordinator, global rank 0, is unreachable: no answer from "
                           "10.0.0.1 for 3 s (HORA_LINK_TIMEOUT_SECONDS): its host is down or the network to it "
                           "is cut")


def on_host(rank, host, line, exited_at=1.0):
    return outcome(rank, 1, exited_at, TRACEBACK + [line], host=host)


def test_two_hosts_that_lost_each_other_are_named_with_their_ranks():
    summary = failures.Summary([
        on_host(0, "a", UNREACHABLE.format(missing=2, host=2)), on_host(1, "a", UNREACHABLE.format(missing=2, host=2)),
        on_host(2, "b", COORDINATOR_UNREACHABLE), on_host(3, "b", COORDINATOR_UNREACHABLE)])
    lines = summary.lines(keep_going=True)
    assert lines[-1] == ("no rank failed on its own: hosts a (ranks 0, 1) and b (ranks 2, 3) lost each other: no "
                         "answer for 3 s (HORA_LINK_TIMEOUT_SECONDS): a host is down or the network between the "
                         "hosts is cut")
    assert "rank 2 exited with code 1: PeerFailureError because of rank 0 (in process set 0 [0, 1, 2, 3, 4, 5])" in lines


def test_the_host_cut_off_from_the_others_is_named():
    # Hosts a and b each lost c's ranks; c's ranks lost the coordinator on a.
    cut = UNREACHABLE.format(missing=4, host=3)
    summary = failures.Summary([
        on_host(0, "a", cut), on_host(1, "a", cut), on_host(2, "b", cut), on_host(3, "b", cut),
        on_host(4, "c", COORDINATOR_UNREACHABLE), on_host(5, "c", COORDINATOR_UNREACHABLE)])
    assert summary.lines(keep_going=False)[-1] == (
        "no rank failed on its own: host c (ranks 4, 5) became unreachable from a (ranks 0, 1), b (ranks 2, 3): no "
        "answer for 3 s (HORA_LINK_TIMEOUT_SECONDS): a host is down or the network between the hosts is cut")


def test_every_rank_of_a_host_killed_is_one_cause():
    summary = failures.Summary([
        on_host(0, "a", PEER.format(set="0 [0, 1, 2, 3]", missing=2), exited_at=2.0),
        on_host(1, "a", PEER.format(set="0 [0, 1, 2, 3]", missing=2), exited_at=2.0),
        outcome(2, -9, 1.0, host="b"), outcome(3, -9, 1.1, host="b")])
    assert summary.lines(keep_going=True)[-1] == "every rank on host b (ranks 2, 3) failed: killed by signal 9 (SIGKILL)"
    # One rank of two killed is that rank's failure, as before.
    one = failures.Summary([outcome(2, -9, 1.0, host="b"), outcome(3, 0, 1.1, host="b"),
                            on_host(0, "a", PEER.format(set="0 [0, 1, 2, 3]", missing=2), exited_at=2.0)])
    assert one.lines(keep_going=True)[-1] == "rank 2 killed by signal 9 (SIGKILL) (the first rank to fail)"


def test_the_same_python_error_on_every_rank_of_a_host_is_the_programs():
    error = TRACEBACK + ["ValueError: bad config"]
    summary = failures.Summary([
        outcome(2, 1, 1.0, error, host="b"), outcome(3, 1, 1.1, error, host="b"),
        on_host(0, "a", PEER.format(set="0 [0, 1, 2, 3]", missing=2), exited_at=2.0),
        on_host(1, "a", PEER.format(set="0 [0, 1, 2, 3]", missing=2), exited_at=2.0)])
    assert summary.lines(keep_going=True)[-1] == ("rank 2 exited with code 1 (the first rank to fail): "
                                                  "ValueError: bad config")
