"""Jobs across simulated hosts (scripts/cluster.sh: network namespaces with
their own host names, joined by a bridge) started through horarun's
--launch-agent, and the agent option's errors."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, WORKERS

CLUSTER = os.path.join(REPO, "scripts", "cluster.sh")
# A cluster of the tests' own, apart from one a benchmark may have made.
CLUSTER_ENV = dict(os.environ, HORA_CLUSTER="horat", HORA_CLUSTER_SUBNET="10.232.0")
AGENT = f"{CLUSTER} exec"


def _cluster(*args, check=True):
    return subprocess.run([CLUSTER, *args], capture_output=True, text=True, env=CLUSTER_ENV,
                          timeout=60, check=check)


def _why_no_cluster():
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["ip", "netns", "add", "horat-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces cannot be made here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", "horat-probe"], check=True)
    return None


@pytest.fixture(scope="module")
def hosts():
    why = _why_no_cluster()
    if why:
        pytest.skip(why)
    made = _cluster("up", "2")
    try:
        yield made.stdout.split()
    finally:
        _cluster("down")


def horarun(*args, timeout=120):
    cmd = [sys.executable, "-m", "hora.runner", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=CLUSTER_ENV)


def test_the_cluster_has_hosts_of_their_own(hosts):
    assert hosts == ["horat-host1", "horat-host2"]
    with open("/etc/hosts") as f:
        assert "10.232.0.2 horat-host2" in f.read().splitlines()
    seen = _cluster("exec", "-o", "BatchMode=yes", "horat-host2", "hostname;", "cat", "/proc/net/dev")
    assert seen.stdout.splitlines()[0] == "horat-host2"
    assert "eth0" in seen.stdout


def test_a_job_runs_across_the_hosts_through_the_launch_agent(hosts):
    out = horarun("--launch-agent", AGENT, "-H", "horat-host1:2,horat-host2:2", "-np", "4",
                  sys.executable, os.path.join(WORKERS, "cluster_ranks.py"))
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = sorted((json.loads(line.split(":", 1)[1]) for line in out.stdout.splitlines()
                    if line.startswith("[") and '{"rank"' in line), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["host"] == hosts[r["rank"] // 2]
        assert (r["local_size"], r["cross_size"]) == (2, 2)
        assert r["global"] == [10.0] * 3
        assert r["local"] == [3.0] * 3 if r["rank"] < 2 else [7.0] * 3
        assert r["across"] == [4.0] * 3 if r["rank"] % 2 == 0 else [6.0] * 3


def test_the_agent_refuses_what_is_not_a_host(hosts):
    out = _cluster("exec", "no-such-host", "true", check=False)
    assert out.returncode == 2
    assert "no simulated host 'no-such-host'" in out.stderr


def test_cluster_up_names_a_bad_count():
    out = subprocess.run([CLUSTER, "up", "two"], capture_output=True, text=True, env=CLUSTER_ENV)
    assert out.returncode == 2
    assert "must be a number, got 'two'" in out.stderr or "needs root" in out.stderr


@pytest.mark.parametrize("agent, message", [
    ("", "--launch-agent names no program"),
    ("no-such-agent-program --flag", "no program 'no-such-agent-program' found"),
    ("'unclosed", "No closing quotation"),
])
def test_a_bad_launch_agent_is_named(agent, message):
    out = horarun("--launch-agent", agent, "-H", "elsewhere:1", "-np", "1", "true")
    assert out.returncode == 2
    assert message in out.stderr


def test_ssh_options_do_not_go_with_a_launch_agent():
    out = horarun("--launch-agent", "env", "--ssh-port", "22", "-H", "elsewhere:1", "-np", "1", "true")
    assert out.returncode == 2
    assert "--ssh-port is an option of ssh" in out.stderr


def test_the_agent_takes_the_host_and_the_script_as_ssh_would(tmp_path):
    # An agent that records its arguments and runs nothing: the rank "ends" at once.
    record = tmp_path / "agent.args"
    agent = tmp_path / "agent"
    agent.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\n")
    agent.chmod(0o755)
    out = horarun("--launch-agent", f"{agent} --via gateway", "-H", "elsewhere:1", "-np", "1",
                  "--start-timeout", "5", "true", timeout=60)
    assert out.returncode == 0, out.stderr
    words = record.read_text().split("\n", 3)
    assert words[:3] == ["--via", "gateway", "elsewhere"]
    script = words[3]   # one argument: the shell script ssh would run
    assert script.startswith("IFS= read -r HORA_SECRET") and f"cd {REPO}" in script


def test_mpirun_passes_the_agent_to_open_mpi():
    from hora.runner import launch, mpi_run

    args = launch.parse_args(["--mpi", "--launch-agent", "env ARG=1", "-np", "2", "true"])
    cmd = mpi_run.mpirun_command(args, "mpirun", "openmpi", {}, is_root=False)
    assert cmd[cmd.index("plm_rsh_agent") + 1] == "env ARG=1"
    with pytest.raises(mpi_run.LauncherOptionError, match="--launch-agent is not supported"):
        mpi_run.mpirun_command(args, "mpiexec", "mpich", {}, is_root=False)


# --- faults between hosts: a cut link, a host's ranks killed, a slow link ----

FAULTS = os.path.join(WORKERS, "cluster_faults.py")
# Only a link's silence can fail the global set within the test's time.
FAULT_LIMITS = {"HORA_LINK_TIMEOUT_SECONDS": "3", "HORA_OP_TIMEOUT_SECONDS": "300"}


def _results(stdout):
    found = {}
    for line in stdout.splitlines():
        if line.startswith("[") and "]:RESULT " in line:
            result = json.loads(line.split("]:RESULT ", 1)[1])
            found[result["rank"]] = result
    return found


def _run_with_fault(hosts, fault, cluster_env=CLUSTER_ENV, steps=100000, elements=4):
    """Runs cluster_faults.py on 2 + 2 ranks; once rank 0 has run 20 steps,
    calls fault() (None: no fault). Returns (exit code, stdout, stderr)."""
    cmd = [sys.executable, "-m", "hora.runner", "--keep-going", "--launch-agent", f"{CLUSTER} exec",
           "-H", f"{hosts[0]}:2,{hosts[1]}:2", "-np", "4", sys.executable, FAULTS, str(steps), str(elements)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                           env=dict(cluster_env, **FAULT_LIMITS))
    out = []
    try:
        for line in job.stdout:
            out.append(line)
            if fault is not None and line.strip() == "[0]:STEP 20":
                fault()
                fault = None
        stdout, stderr = "".join(out), job.stderr.read()
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    return job.returncode, stdout, stderr


def _assert_hosts_sets_trained_on(results, text):
    for rank, result in results.items():
        assert result["local_right"], (rank, result, text)
        assert result["steps_after_failure"] == 20, (rank, result, text)


def test_a_cut_link_fails_only_the_sets_across_it_naming_the_lost_hosts(hosts):
    def cut():
        _cluster("link", hosts[1], "down")

    try:
        code, stdout, stderr = _run_with_fault(hosts, cut)
    finally:
        _cluster("link", hosts[1], "up")
    text = f"exit {code}\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-6000:]}"
    results = _results(stdout)
    assert sorted(results) == [0, 1, 2, 3], text
    _assert_hosts_sets_trained_on(results, text)
    for rank, result in results.items():
        assert result["error_type"] == "PeerFailureError", text
        other = "10.232.0.2" if rank < 2 else "10.232.0.1"
        assert f"is unreachable: no answer from {other} for 3 s (HORA_LINK_TIMEOUT_SECONDS)" in result["error"], text
    assert code == 1, text
    assert stderr.splitlines()[-1] == (
        f"horarun: no rank failed on its own: hosts {hosts[0]} (ranks 0, 1) and {hosts[1]} (ranks 2, 3) lost each "
        "other: no answer for 3 s (HORA_LINK_TIMEOUT_SECONDS): a host is down or the network between the hosts is "
        "cut"), text


def test_a_hosts_ranks_killed_at_once_fail_only_the_sets_across_it(hosts):
    def kill_host():
        pids = subprocess.run(["ip", "netns", "pids", hosts[1]], capture_output=True, text=True, check=True)
        for pid in pids.stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass

    code, stdout, stderr = _run_with_fault(hosts, kill_host)
    text = f"exit {code}\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-6000:]}"
    results = _results(stdout)
    assert sorted(results) == [0, 1], text
    _assert_hosts_sets_trained_on(results, text)
    for result in results.values():
        assert result["error_type"] == "PeerFailureError", text
        assert "(at 10.232.0.2) closed (its process exited" in result["error"], text
    assert stderr.splitlines()[-1] == (
        f"horarun: every rank on host {hosts[1]} (ranks 2, 3) failed: killed by signal 9 (SIGKILL)"), text


def test_a_slow_link_fails_nothing():
    why = _why_no_cluster()
    if why:
        pytest.skip(why)
    slow_env = dict(os.environ, HORA_CLUSTER="horas", HORA_CLUSTER_SUBNET="10.233.0")
    made = subprocess.run([CLUSTER, "up", "2", "100mbit"], capture_output=True, text=True, env=slow_env,
                          timeout=60, check=True)
    try:
        # 1 MiB a step each way between the hosts: about 0.1 s a step at 100 Mbit/s.
        code, stdout, stderr = _run_with_fault(made.stdout.split(), None, cluster_env=slow_env, steps=30,
                                               elements=1 << 18)
    finally:
        subprocess.run([CLUSTER, "down"], capture_output=True, text=True, env=slow_env, timeout=60)
    text = f"exit {code}\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-6000:]}"
    results = _results(stdout)
    assert code == 0, text
    assert sorted(results) == [0, 1, 2, 3], text
    for result in results.values():
        assert result["error"] is None and result["global_right"] and result["local_right"], text
        assert result["local_steps"] == 30, text
