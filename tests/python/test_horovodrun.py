"""horovodrun on hora (hora.runner.horovodrun): Horovod's flags map onto
horarun's, flags without a meaning on hora are noted once, flags hora does
not support yet stop with an error naming them."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import mpi_unavailable

from hora.runner import horovodrun, launch, mpi_run

HOROVODRUN = [sys.executable, "-m", "hora.runner.horovodrun"]
PRINT_ENV = textwrap.dedent("""
    import json, os
    print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(("HORA_", "HOROVOD_"))}))
""")


def run(*args, env=None, cwd=None):
    return subprocess.run([*HOROVODRUN, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_mapped_flags_become_horarun_flags():
    args = horovodrun.parse_args([
        "-np", "4", "-H", "a:2,b:2", "--start-timeout", "45", "-p", "2222", "-i", "/keys/id",
        "--output-filename", "logs", "--verbose", "-prefix-timestamp", "--mpi", "--mpi-args=--bind-to none",
        "python", "train.py", "--lr", "0.1"])
    assert horovodrun.horarun_arguments(args) == [
        "-np", "4", "-H", "a:2,b:2", "--start-timeout", "45", "--ssh-port", "2222",
        "--ssh-identity-file", "/keys/id", "--output-filename", "logs", "--mpi-args", "--bind-to none",
        "--mpi", "-v", "--prefix-output-with-timestamp", "--", "python", "train.py", "--lr", "0.1"]
    args = horovodrun.parse_args(["--num-proc", "2", "-hostfile", "hosts", "--gloo", "python", "x.py"])
    assert horovodrun.horarun_arguments(args) == ["-np", "2", "--hostfile", "hosts", "--", "python", "x.py"]


def test_tuning_flags_become_the_horovod_variables_hora_reads():
    args = horovodrun.parse_args([
        "-np", "1", "--fusion-threshold-mb", "2", "--cache-capacity", "7", "--no-stall-check",
        "--stall-check-warning-time-seconds", "11", "--stall-check-shutdown-time-seconds", "22",
        "--gloo-timeout-seconds", "33", "true"])
    assert horovodrun.environment_settings(args) == {
        "HOROVOD_FUSION_THRESHOLD": str(2 << 20), "HOROVOD_CACHE_CAPACITY": "7",
        "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "11",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "22", "HOROVOD_GLOO_TIMEOUT_SECONDS": "33"}
    args = horovodrun.parse_args(["-np", "1", "--stall-check", "true"])
    assert horovodrun.environment_settings(args) == {"HOROVOD_STALL_CHECK_DISABLE": "0"}


def test_ranks_get_the_mapped_settings():
    # OMP_NUM_THREADS chosen: horarun has nothing to note about it either.
    result = run("-np", "2", "--start-timeout", "15", "--fusion-threshold-mb", "3", "--cache-capacity", "5",
                 "--gloo-timeout-seconds", "40", sys.executable, "-c", PRINT_ENV,
                 env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    envs = [json.loads(line.split(":", 1)[1]) for line in sorted(result.stdout.splitlines())]
    assert [e["HORA_RANK"] for e in envs] == ["0", "1"]
    for e in envs:
        assert e["HORA_SIZE"] == "2" and float(e["HORA_START_TIMEOUT"]) == 15
        assert e["HOROVOD_FUSION_THRESHOLD"] == str(3 << 20) and e["HOROVOD_CACHE_CAPACITY"] == "5"
        assert e["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "40"
    assert result.stderr == ""


def test_flags_without_meaning_are_accepted_and_noted_once():
    flags = []
    for options, nargs, _ in horovodrun.NO_EFFECT:
        for option in options:
            flags += [option] + ["1"] * nargs
    flags += ["--cycle-time-ms", "2"]   # given twice: still one note
    result = run("-np", "1", *flags, sys.executable, "-c", "print('ran')")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0]:ran\n"
    for options, _, reason in horovodrun.NO_EFFECT:
        for option in options:
            assert result.stderr.count(f"horovodrun: {option} has no effect on hora: {reason}\n") == 1, \
                (option, result.stderr)
    notes = result.stderr.splitlines()
    assert len(notes) == sum(len(options) for options, _, _ in horovodrun.NO_EFFECT), notes


CONFIG = textwrap.dedent("""
    controller: mpi
    params:
      fusion_threshold_mb: 8
      cycle_time_ms: 5
      cache_capacity: 64
      hierarchical_allreduce: false
    timeline:
      filename: trace.json
      mark_cycles: true
    stall_check:
      enabled: false
      warning_time_seconds: 9
      shutdown_time_seconds: 0
    library_options:
      gloo_timeout_seconds: 77
    logging:
      level: INFO
""")


def test_a_config_file_sets_what_the_command_line_does_not(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text(CONFIG)
    args = horovodrun.parse_args(["-np", "2", "--config-file", str(config), "--cache-capacity", "3", "x"])
    assert args.use_mpi and not args.use_gloo
    assert horovodrun.environment_settings(args) == {
        "HOROVOD_FUSION_THRESHOLD": str(8 << 20), "HOROVOD_CACHE_CAPACITY": "3",   # the flag wins
        "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "9",
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0", "HOROVOD_GLOO_TIMEOUT_SECONDS": "77"}
    argv = horovodrun.horarun_arguments(args)
    assert argv[argv.index("--timeline-filename") + 1] == "trace.json" and "--timeline-mark-cycles" in argv
    assert "--mpi" in argv
    # Keys without meaning on hora are noted like their flags; false ones are not.
    assert args.no_effect == {"params.cycle_time_ms in --config-file": "hora negotiates when work arrives, "
                                                                        "without a cycle",
                              "logging.level in --config-file": "hora prints warnings and errors only"}
    # --gloo on the command line wins over the file's controller.
    args = horovodrun.parse_args(["-np", "2", "--gloo", "--config-file", str(config), "x"])
    assert not args.use_mpi


def test_a_config_file_reaches_the_ranks(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text("params:\n  fusion_threshold_mb: 5\nstall_check:\n  warning_time_seconds: 12\n")
    result = run("-np", "1", "--config-file", str(config), sys.executable, "-c", PRINT_ENV,
                 env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout.split(":", 1)[1])
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(5 << 20) and env["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "12"


@pytest.mark.parametrize("text, message", [
    ("params: [1, 2]", "section 'params' must be a mapping"),
    ("parameters:\n  fusion_threshold_mb: 1", "unknown section 'parameters'"),
    ("params:\n  fusion_threshold: 1", "unknown key 'fusion_threshold' in section 'params'"),
    ("params:\n  fusion_threshold_mb: lots", "params.fusion_threshold_mb must be an integer, got 'lots'"),
    ("params:\n  cache_capacity: -1", "params.cache_capacity must not be negative, got -1"),
    ("stall_check:\n  enabled: maybe", "stall_check.enabled must be true or false, got 'maybe'"),
    ("controller: nccl", "controller must be gloo or mpi, got 'nccl'"),
    ("- a list", "must hold a mapping of sections, got list"),
    ("params: {fusion_threshold_mb: 1", "is not valid YAML"),
])
def test_a_bad_config_file_is_refused_naming_what_is_wrong(tmp_path, text, message):
    config = tmp_path / "horovod.yaml"
    config.write_text(text)
    result = run("-np", "1", "--config-file", str(config), "true")
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    missing = run("-np", "1", "--config-file", str(tmp_path / "absent.yaml"), "true")
    assert missing.returncode == 2 and "cannot read --config-file" in missing.stderr


def test_network_interfaces_choose_where_ranks_listen():
    args = horovodrun.parse_args(["-np", "2", "--network-interfaces", "lo", "x"])
    assert horovodrun.horarun_arguments(args) == ["-np", "2", "--network-interfaces", "lo", "--", "x"]
    script = "import hora.numpy as hvd; hvd.init(); print(hvd.allreduce([1.0], name='x', op=hvd.Sum)[0])"
    result = run("-np", "2", "--network-interface", "no-such-interface0,lo", sys.executable, "-c", script,
                 env=dict(os.environ, OMP_NUM_THREADS="1", HORA_SHM="0"))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0]:2.0", "[1]:2.0"]
    result = run("-np", "1", "--network-interfaces", "no-such-interface0", sys.executable, "-c",
                 "import hora.numpy as hvd; hvd.init()", env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode != 0
    assert "none of the network interfaces no-such-interface0 has an address on this host" in result.stderr
    assert run("-np", "1", "--network-interfaces", ",", "true").returncode == 2


def test_mpirun_uses_the_network_interfaces():
    args = launch.parse_args(["-np", "2", "--mpi", "--network-interfaces", "eth0,ib0", "x"])
    cmd = mpi_run.mpirun_command(args, "mpirun", "openmpi", {}, is_root=False)
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "eth0,ib0" and cmd[cmd.index("btl_tcp_if_include") - 1] == "--mca"
    assert launch.job_environment(args)["HORA_NETWORK_INTERFACES"] == "eth0,ib0"


def test_elastic_flags_go_to_horarun():
    args = horovodrun.parse_args(["--min-np", "2", "--max-np", "4", "--slots-per-host", "2", "--elastic-timeout", "30",
                                  "--reset-limit", "3", "--blacklist-cooldown-range", "1", "5",
                                  "--host-discovery-script", "./discover.sh", "python", "train.py"])
    argv = horovodrun.horarun_arguments(args)
    assert argv == ["--min-np", "2", "--max-np", "4", "--slots-per-host", "2", "--elastic-timeout", "30",
                    "--reset-limit", "3", "--blacklist-cooldown-range", "1", "5",
                    "--host-discovery-script", "./discover.sh", "--", "python", "train.py"]
    parsed = launch.parse_args(argv)
    assert parsed.elastic and (parsed.min_np, parsed.max_np, parsed.blacklist_cooldown_range) == (2, 4, [1.0, 5.0])


def test_mpi_args_without_mpi_are_noted():
    result = run("-np", "1", "--mpi-args=--bind-to none", sys.executable, "-c", "pass")
    assert result.returncode == 0, result.stderr
    assert "--mpi-args has no effect on hora: it applies with --mpi only" in result.stderr


@pytest.mark.parametrize("flag, values, what", [
    (option, ["1"] * nargs, what)
    for options, nargs, what in horovodrun.NOT_SUPPORTED for option in options])
def test_flags_not_supported_yet_stop_with_an_error(flag, values, what):
    result = run("-np", "2", flag, *values, sys.executable, "-c", "print('ran')")
    assert result.returncode == 2
    assert f"horovodrun: error: {flag} is not supported by hora yet ({what})" in result.stderr, result.stderr
    assert "ran" not in result.stdout


@pytest.mark.parametrize("args, message", [
    (["python", "x.py"], "-np/--num-proc is required"),
    (["-np", "2"], "no command to run"),
    (["-np", "2", "--gloo", "--mpi", "true"], "not allowed with argument"),
    (["-np", "2", "-H", "a:1", "-hostfile", "f", "true"], "not allowed with argument"),
    (["-np", "2", "-p", "70000", "true"], "--ssh-port must be a port number"),
    (["-np", "0", "true"], "-np must be at least 1"),
])
def test_bad_command_lines_are_refused(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr


def test_version_and_check_build():
    assert run("-v").stdout.strip() == horovodrun.HOROVOD_VERSION
    report = run("-cb")
    assert report.returncode == 0
    assert re.search(r"\[X\] PyTorch", report.stdout) and re.search(r"\[X\] Gloo", report.stdout), report.stdout
    assert "[ ] NCCL" in report.stdout


def test_check_build_marks_only_frameworks_that_import(tmp_path):
    # A framework that is installed but fails to import is not available.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('a broken torch')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    report = run("-cb", env=env)
    assert report.returncode == 0, report.stderr
    assert "[ ] PyTorch" in report.stdout, report.stdout
    mxnet = subprocess.run([sys.executable, "-c", "import mxnet"], capture_output=True).returncode == 0
    assert f"[{'X' if mxnet else ' '}] MXNet" in report.stdout, report.stdout


@pytest.mark.parametrize("option", ["--nproc_per_node", "--nproc-per-node=2"])
def test_other_launchers_process_counts_get_a_hint(option):
    result = run(option, "2", "true")
    assert result.returncode == 2
    assert f"unrecognized argument {option.split('=')[0]}: did you mean -np?" in result.stderr, result.stderr


def test_output_files_and_timestamps(tmp_path):
    result = run("-np", "2", "--output-filename", str(tmp_path / "logs"), "-prefix-timestamp",
                 sys.executable, "-c", "import os, sys; print('out', os.environ['HORA_RANK']); "
                                       "print('err', file=sys.stderr)")
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (tmp_path / "logs" / f"rank.{rank}" / "stdout").read_text() == f"out {rank}\n"
        assert (tmp_path / "logs" / f"rank.{rank}" / "stderr").read_text() == "err\n"
    for line in result.stdout.splitlines():
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[[01]\]:out [01]", line), line


FAKE_SSH = """#!/bin/sh
# Stands in for ssh: records its options, runs the remote script here.
options=""
while [ "$1" = "-o" ]; do options="$options $2"; shift 2; done
[ "$1" = "--" ] && shift
echo "$1$options" >> "$(dirname "$0")/ssh-calls"
shift
exec sh -c "$1"
"""


def test_ssh_port_and_identity_reach_ssh(tmp_path):
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = run("-np", "2", "-H", "nodea:1,nodeb:1", "-p", "2222", "-i", "/keys/id_test",
                 sys.executable, "-c", "print('remote ok')", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0]:remote ok", "[1]:remote ok"]
    calls = sorted((tmp_path / "ssh-calls").read_text().splitlines())
    assert len(calls) == 2
    for host, call in zip(("nodea", "nodeb"), calls):
        assert call.split()[0] == host
        assert "Port=2222" in call.split() and "IdentityFile=/keys/id_test" in call.split(), call


def test_mpirun_gets_the_ssh_output_and_timestamp_flags():
    args = launch.parse_args(["-np", "2", "-H", "a:1,b:1", "--mpi", "--ssh-port", "2222", "--ssh-identity-file",
                              "/keys/id", "--output-filename", "logs", "--prefix-output-with-timestamp", "x"])
    cmd = mpi_run.mpirun_command(args, "mpirun", "openmpi", {}, is_root=False)
    assert cmd[cmd.index("plm_rsh_args") + 1] == "-p 2222 -i /keys/id" and cmd[cmd.index("plm_rsh_args") - 1] == "--mca"
    assert cmd[cmd.index("--output-filename") + 1] == "logs" and "--timestamp-output" in cmd
    with pytest.raises(mpi_run.LauncherOptionError, match="--output-filename is not supported with MPICH"):
        mpi_run.mpirun_command(launch.parse_args(["-np", "1", "--mpi", "--output-filename", "o", "x"]),
                               "mpiexec", "mpich", {}, is_root=False)


def test_horovodrun_with_mpi_runs_through_mpirun():
    if mpi_unavailable():
        pytest.skip(mpi_unavailable())
    result = run("-np", "2", "--mpi", sys.executable, "-c",
                 "import os, hora.numpy as hvd; hvd.init(); "
                 "os.write(1, f\"backend {'mpi' if hvd.mpi_enabled() else 'gloo'} {hvd.rank()}\\n\".encode())")
    assert result.returncode == 0, result.stderr
    assert sorted(re.findall(r"backend (\w+) (\d)", result.stdout)) == [("mpi", "0"), ("mpi", "1")], result.stdout
