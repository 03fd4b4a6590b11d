"""Ctrl-C: SIGINT to horarun while ranks wait in a collective ends every
rank promptly with one line and no 'Error in sys.excepthook'; SIGINT to one
rank ends it with one line, and horarun names it as the rank that failed
first."""

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCKED = os.path.join(HERE, "workers", "blocked.py")


def start(mode, np):
    return subprocess.Popen([sys.executable, "-m", "hora.runner", "-np", str(np), sys.executable, BLOCKED, mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


def rank_pids(process, np):
    """{rank: pid} from the ranks' 'pid' lines, once all have printed one."""
    pids = {}
    while len(pids) < np:
        line = process.stdout.readline()
        assert line, f"horarun ended early: {process.stderr.read()}"
        rank, text = line.rstrip("\n").split(":", 1)
        pids[int(rank.strip("[]"))] = int(text.split()[1])
    time.sleep(0.3)   # let them reach the collective
    return pids


def interrupted(process, signal_to, np):
    """Sends SIGINT (to horarun, or to one rank) and returns (seconds to the
    end, stdout, stderr)."""
    pids = rank_pids(process, np)
    start_time = time.monotonic()
    try:
        os.kill(process.pid if signal_to is None else pids[signal_to], signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return time.monotonic() - start_time, out, err


def assert_one_line_per_rank(err, np):
    rank_lines = [line for line in err.splitlines() if line.startswith("[")]
    assert sorted(line[:3] for line in rank_lines) == [f"[{r}]" for r in range(np)], err
    for line in rank_lines:
        assert line[3:].startswith(f":KeyboardInterrupt: rank {line[1]} stopped at {BLOCKED}:"), err
    assert "sys.excepthook" not in err and "Traceback" not in err, err


def test_ctrl_c_ends_ranks_that_diverged_in_a_collective():
    # No op can complete: each rank waits in an allreduce of its own name.
    process = start("diverged", 4)
    seconds, out, err = interrupted(process, None, 4)
    assert process.returncode == 128 + signal.SIGINT, err
    assert_one_line_per_rank(err, 4)
    assert "waiting in hora's allreduce" in err
    assert err.splitlines()[-1] == "horarun: stopped by signal 2", err
    assert seconds < 4, seconds


def test_ctrl_c_while_a_peer_ends_first_gives_no_excepthook_noise():
    # Rank 1 sleeps and ends at once; the op rank 0 waits for then fails
    # while its own interrupt is pending: the report stays one line. The
    # race is timing-dependent, so run it a few times.
    for _ in range(3):
        process = start("one-sleeps", 2)
        seconds, out, err = interrupted(process, None, 2)
        assert process.returncode == 128 + signal.SIGINT, err
        assert_one_line_per_rank(err, 2)
        assert seconds < 4, seconds


def test_ctrl_c_in_library_code_names_the_programs_line_and_prints_no_leak_report():
    # Each rank is inside the standard library's statistics module when the
    # interrupt arrives, with a daemon thread holding a handle (alive at
    # exit): the line names blocked.py, and nanobind reports no leak.
    process = start("in-library", 2)
    seconds, out, err = interrupted(process, None, 2)
    assert process.returncode == 128 + signal.SIGINT, err
    assert_one_line_per_rank(err, 2)
    assert "statistics.py" not in err, err
    assert "nanobind" not in err and "leaked" not in err, err


def test_sigint_to_one_rank_makes_it_the_named_cause():
    process = start("diverged", 2)
    seconds, out, err = interrupted(process, 1, 2)
    assert seconds < 10, seconds
    lines = err.splitlines()
    interrupt = [line for line in lines if line.startswith("[1]:")]
    assert len(interrupt) == 1 and interrupt[0].startswith("[1]:KeyboardInterrupt: rank 1 stopped at"), err
    assert "sys.excepthook" not in err, err
    assert lines[-1].startswith("horarun: rank 1 exited with code 130 (the first rank to fail): "
                                "KeyboardInterrupt: rank 1 stopped at"), err
    assert "horarun: rank 0 failed because of rank 1: hora.errors.PeerFailureError" in err, err
