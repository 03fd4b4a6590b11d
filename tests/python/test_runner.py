"""horarun: the environment each rank gets, output prefixes, failure handling,
signals, argument checking, host lists and the ssh path."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hora.runner import env as rank_env
from hora.runner import hosts

HORARUN = [sys.executable, "-m", "hora.runner"]


def horarun(*args, timeout=60, env=None, cwd=None):
    return subprocess.run([*HORARUN, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def python_rank(source):
    return [sys.executable, "-c", textwrap.dedent(source)]


def lines_by_rank(text):
    """Maps rank -> its lines, from '[rank]:line' output."""
    result = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\[(\d+)\]:(.*)", line)
        assert match, f"line without a rank prefix: {line!r}"
        result.setdefault(int(match.group(1)), []).append(match.group(2))
    return result


PRINT_ENV = """
    import json, os
    print(json.dumps({k: v for k, v in os.environ.items()
                      if k.startswith(("HORA_", "HOROVOD_"))}))
"""


def test_four_local_ranks_get_their_coordinates():
    result = horarun("-np", "4", *python_rank(PRINT_ENV))
    assert result.returncode == 0, result.stderr
    import json
    envs = {rank: json.loads(lines[0]) for rank, lines in lines_by_rank(result.stdout).items()}
    assert sorted(envs) == [0, 1, 2, 3]
    ports = {e["HORA_RENDEZVOUS_PORT"] for e in envs.values()}
    job_secrets = {e["HORA_SECRET"] for e in envs.values()}
    assert len(ports) == 1 and int(ports.pop()) > 0
    assert len(job_secrets) == 1 and re.fullmatch(r"[0-9a-f]{32}", job_secrets.pop())
    for rank, e in envs.items():
        expected = {"RANK": rank, "SIZE": 4, "LOCAL_RANK": rank, "LOCAL_SIZE": 4,
                    "CROSS_RANK": 0, "CROSS_SIZE": 1, "HOSTNAME": "127.0.0.1"}
        for name, value in expected.items():
            assert e["HORA_" + name] == str(value), name
            assert e["HOROVOD_" + name] == str(value), name
        assert e["HORA_RENDEZVOUS_ADDR"] == "127.0.0.1"


def test_each_job_gets_a_fresh_secret():
    source = "import os; print(os.environ['HORA_SECRET'])"
    first = horarun("-np", "1", sys.executable, "-c", source)
    second = horarun("-np", "1", sys.executable, "-c", source)
    assert first.stdout != second.stdout


def test_ranks_reach_the_rendezvous_server():
    result = horarun("-np", "4", *python_rank("""
        import os
        from hora.runner.rendezvous import RendezvousClient
        rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
        with RendezvousClient(os.environ["HORA_RENDEZVOUS_ADDR"],
                              os.environ["HORA_RENDEZVOUS_PORT"],
                              os.environ["HORA_SECRET"]) as store:
            store.set(f"hello/{rank}", str(rank * 10))
            store.wait([f"hello/{r}" for r in range(size)], timeout=30)
            print(sum(int(store.get(f"hello/{r}")) for r in range(size)))
    """))
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {r: ["60"] for r in range(4)}


def test_output_lines_are_prefixed_with_the_rank():
    result = horarun("-np", "2", *python_rank("""
        import os, sys
        rank = os.environ["HORA_RANK"]
        print(f"out one {rank}")
        print(f"out two {rank}")
        print(f"err {rank}", file=sys.stderr)
        sys.stdout.write("no newline")
    """), env=dict(os.environ, OMP_NUM_THREADS="1"))   # nothing from horarun itself on stderr
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {
        r: [f"out one {r}", f"out two {r}", "no newline"] for r in (0, 1)}
    assert lines_by_rank(result.stderr) == {r: [f"err {r}"] for r in (0, 1)}


def test_failing_rank_stops_the_others_and_sets_the_exit_code():
    start = time.monotonic()
    result = horarun("-np", "4", *python_rank("""
        import os, sys, time
        if os.environ["HORA_RANK"] == "2":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(60)
    """))
    elapsed = time.monotonic() - start
    assert result.returncode == 3
    assert result.stderr.splitlines()[-1] == "horarun: rank 2 exited with code 3 (the first rank to fail)"
    assert "horarun: ranks 0, 1, 3 stopped by horarun after the failure" in result.stderr
    # The sleeping ranks were terminated, not waited for.
    assert elapsed < 10


def test_rank_killed_by_a_signal_is_named():
    result = horarun("-np", "2", *python_rank("""
        import os, signal, time
        if os.environ["HORA_RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """))
    assert result.returncode == 128 + signal.SIGKILL
    assert "horarun: rank 1 killed by signal 9 (SIGKILL) (the first rank to fail)" in result.stderr


def test_all_ranks_succeeding_exits_zero_quietly():
    # (With OMP_NUM_THREADS chosen, horarun has nothing to note about it.)
    result = horarun("-np", "3", sys.executable, "-c", "pass", env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert result.returncode == 0
    assert result.stderr == ""


PRINT_OMP_THREADS = "import os; print(os.environ.get('OMP_NUM_THREADS', 'unset'))"


def environment_without_omp_threads(**extra):
    env = {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}
    env.update(extra)
    return env


def test_ranks_that_share_a_host_get_one_openmp_thread_and_one_note():
    result = horarun("-np", "3", sys.executable, "-c", PRINT_OMP_THREADS, env=environment_without_omp_threads())
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {r: ["1"] for r in range(3)}
    assert result.stderr == rank_env.THREADS_NOTE + "\n"
    assert "set OMP_NUM_THREADS in horarun's environment" in result.stderr


def test_the_users_openmp_threads_are_kept_without_a_note():
    result = horarun("-np", "2", sys.executable, "-c", PRINT_OMP_THREADS,
                     env=environment_without_omp_threads(OMP_NUM_THREADS="3"))
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {0: ["3"], 1: ["3"]}
    assert result.stderr == ""


def test_a_rank_alone_on_its_host_keeps_its_openmp_threads(tmp_path):
    assert horarun("-np", "1", sys.executable, "-c", PRINT_OMP_THREADS,
                   env=environment_without_omp_threads()).stdout == "[0]:unset\n"
    # Over (fake) ssh: the two ranks on nodea get one thread, nodeb's one rank its own.
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    env = environment_without_omp_threads(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = horarun("-np", "3", "-H", "nodea:2,nodeb:1", sys.executable, "-c", PRINT_OMP_THREADS,
                     env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {0: ["1"], 1: ["1"], 2: ["unset"]}


READY_THEN_WAIT_FOR_SIGTERM = """
    import signal, sys, time
    def stop(signum, frame):
        print("got", signum, flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    time.sleep(60)
"""


def wait_for_ready(process, count):
    ready = 0
    while ready < count:
        line = process.stdout.readline()
        assert line, "horarun ended before its ranks were ready"
        ready += line.endswith("ready\n")


def test_sigterm_is_forwarded_to_every_rank():
    process = subprocess.Popen([*HORARUN, "-np", "3", *python_rank(READY_THEN_WAIT_FOR_SIGTERM)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_ready(process, 3)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    # Each rank handled the SIGTERM itself (a rank that never got it would
    # have been killed after horarun's grace, printing nothing).
    assert lines_by_rank(out) == {r: ["got 15"] for r in range(3)}
    assert "stopped by signal 15" in err


def test_a_stopped_rank_still_handles_the_forwarded_sigterm():
    # A rank stopped as the terminal stops a background group that reads it
    # (a launch agent that prompts): horarun continues it, so that it ends
    # by its own handler rather than by the SIGKILL after the grace.
    process = subprocess.Popen([*HORARUN, "-np", "2", *python_rank(READY_THEN_WAIT_FOR_SIGTERM.replace(
        'print("ready", flush=True)', 'print("ready", flush=True); os.kill(os.getpid(), signal.SIGSTOP)').replace(
        "import signal, sys, time", "import os, signal, sys, time"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_ready(process, 2)
        time.sleep(0.3)   # both stopped
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert lines_by_rank(out) == {r: ["got 15"] for r in range(2)}, err


def test_ranks_do_not_outlive_a_killed_horarun():
    process = subprocess.Popen([*HORARUN, "-np", "2", *python_rank("""
        import os, time
        print("pid", os.getpid(), flush=True)
        print("ready", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        while len(pids) < 2:
            line = process.stdout.readline()
            assert line, "horarun ended before its ranks were ready"
            if ":pid " in line:
                pids.append(int(line.split()[-1]))
        process.kill()   # no chance for horarun to stop its ranks itself
        process.wait()
    finally:
        process.kill()
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if running(pid)]
        time.sleep(0.05)
    assert not alive


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python before 3.11 makes a group only with a session")
def test_each_rank_is_a_process_group_of_its_own_in_horaruns_session():
    # Its own group: horarun signals the rank and whatever it started, and a
    # Ctrl-C at the terminal reaches horarun alone. horarun's session: the
    # kernel's autogroup scheduling then keeps the ranks in one group.
    out = horarun("-np", "2", *python_rank("""
        import os
        print(os.getpgrp() == os.getpid(), os.getsid(0) == os.getsid(os.getppid()) != os.getpid())
    """))
    assert out.returncode == 0, out.stderr
    assert lines_by_rank(out.stdout) == {0: ["True True"], 1: ["True True"]}


def running(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("args, message", [
    (["-np", "0", "true"], "-np must be at least 1"),
    (["-np", "-2", "true"], "-np must be at least 1"),
    (["-np", "2"], "no command"),
    (["true"], "-np"),
    (["-np", "5", "-H", "localhost:2", "true"], "5 ranks need 5 slots but the hosts offer only 2"),
    (["-np", "2", "-H", "a:x", "true"], "slot count of 'a' must be a positive integer"),
    (["-np", "2", "-H", "a:0", "true"], "slot count"),
    (["-np", "2", "-H", "a:1,,b:1", "true"], "empty host entry"),
    (["-np", "2", "-H", "bad host:2", "true"], "not a host name"),
    (["-np", "2", "-H", "a:1,a:1", "true"], "listed twice"),
    (["-np", "2", "-H", "a:2", "--hostfile", "f", "true"], "either -H or --hostfile"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts", "true"], "/nonexistent/hosts"),
    (["-np", "2", "--start-timeout", "0", "true"], "--start-timeout must be positive"),
])
def test_bad_arguments_are_rejected_clearly(args, message):
    result = horarun(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("horarun")
    assert script.exists(), f"horarun is not installed beside {sys.executable}"
    result = subprocess.run([str(script), "-np", "2", sys.executable, "-c",
                             "import os; print(os.environ['HORA_SIZE'])"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {0: ["2"], 1: ["2"]}


# --- host lists and placement -------------------------------------------------

def test_host_list_parsing():
    assert hosts.parse_host_list("a:4,b.example.com:2,c") == [
        hosts.Host("a", 4), hosts.Host("b.example.com", 2), hosts.Host("c", 1)]


def test_hostfile_parsing(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# cluster\nnode1 slots=4\n\nnode2:2   # two gpus\nnode3\n")
    assert hosts.parse_hostfile(path) == [
        hosts.Host("node1", 4), hosts.Host("node2", 2), hosts.Host("node3", 1)]
    path.write_text("node1 slots=4 extra\n")
    with pytest.raises(hosts.HostSpecError, match=":1"):
        hosts.parse_hostfile(path)


def test_ranks_fill_hosts_in_order_with_horovod_cross_ranks():
    placed = hosts.place_ranks([hosts.Host("a", 2), hosts.Host("b", 3), hosts.Host("c", 4)], 6)
    table = [(p.rank, p.host, p.local_rank, p.local_size, p.cross_rank, p.cross_size)
             for p in placed]
    assert table == [
        (0, "a", 0, 2, 0, 3),
        (1, "a", 1, 2, 0, 2),   # a and b have a local rank 1
        (2, "b", 0, 3, 1, 3),
        (3, "b", 1, 3, 1, 2),
        (4, "b", 2, 3, 0, 1),   # only b has a local rank 2
        (5, "c", 0, 1, 2, 3),
    ]
    assert {p.size for p in placed} == {6}


def test_unused_hosts_are_dropped():
    placed = hosts.place_ranks([hosts.Host("a", 4), hosts.Host("b", 4)], 3)
    assert {p.host for p in placed} == {"a"}
    assert {p.cross_size for p in placed} == {1}


# --- remote ranks over ssh ---------------------------------------------------

FAKE_SSH = """#!/bin/sh
# Stands in for ssh: drops the options and the host, runs the remote script.
while [ "$1" = "-o" ]; do shift 2; done
[ "$1" = "--" ] && shift
echo "$1" >> "$(dirname "$0")/hosts-contacted"
shift
exec sh -c "$1"
"""


def test_remote_ranks_start_over_ssh_in_the_same_directory(tmp_path):
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
               HOROVOD_FUSION_THRESHOLD="1234")
    result = horarun("-np", "3", "-H", "nodea:2,nodeb:2", *python_rank("""
        import os
        keys = ["HORA_RANK", "HORA_LOCAL_RANK", "HORA_CROSS_RANK", "HORA_CROSS_SIZE",
                "HORA_HOSTNAME", "HOROVOD_HOSTNAME", "HOROVOD_FUSION_THRESHOLD"]
        print(os.getcwd(), *[os.environ[k] for k in keys])
    """), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert lines_by_rank(result.stdout) == {
        0: [f"{tmp_path} 0 0 0 2 nodea nodea 1234"],
        1: [f"{tmp_path} 1 1 0 1 nodea nodea 1234"],
        2: [f"{tmp_path} 2 0 1 2 nodeb nodeb 1234"],
    }
    contacted = (tmp_path / "hosts-contacted").read_text().split()
    assert sorted(contacted) == ["nodea", "nodea", "nodeb"]


def test_remote_command_stops_when_the_ssh_session_ends(tmp_path):
    script = rank_env.remote_script(str(tmp_path), {"MARK": "x"},
                                    python_rank(READY_THEN_WAIT_FOR_SIGTERM))
    shell = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        wait_for_ready(shell, 1)
        shell.stdin.close()   # what the end of the ssh session looks like remotely
        out = shell.stdout.read()
        shell.wait(timeout=10)
    finally:
        shell.kill()
    assert out == "got 15\n"
    assert shell.returncode == 7
