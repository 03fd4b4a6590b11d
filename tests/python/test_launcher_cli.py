"""horarun's command line: an unknown option is named wherever it stands
before the command, --version, and --help with an example and the
environment variables hora reads (kept in step with src/util/env.cc)."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

from hora.runner import usage

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def horarun(*args):
    return subprocess.run([sys.executable, "-m", "hora.runner", *args], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("args, message", [
    (["--fusion-threshold-mb", "64", "-np", "2", "python", "x.py"],
     "unknown option --fusion-threshold-mb: a horovodrun flag; horovodrun takes it, and horarun's ranks read "
     "the setting from HOROVOD_FUSION_THRESHOLD"),
    (["-np", "2", "--fusion-threshold-mb", "64", "python", "x.py"], "unknown option --fusion-threshold-mb"),
    (["--bogus", "-np", "2", "python", "x.py"], "unknown option --bogus (see horarun --help)"),
    (["-np", "2", "-H", "localhost:2", "--bogus=1", "python", "x.py"], "unknown option --bogus"),
    (["-np", "2", "-x", "python", "x.py"], "unknown option -x"),
    (["--jsrun", "-np", "2", "python", "x.py"],
     "unknown option --jsrun: a horovodrun flag for launching through jsrun (LSF); use --mpi or -H, which hora "
     "does not support yet"),
    (["--cycle-time-ms", "1", "-np", "2", "python", "x.py"],
     "unknown option --cycle-time-ms: a horovodrun flag without effect on hora"),
    (["-n", "2", "python", "x.py"], "unknown option -n: did you mean -np?"),
    (["--nproc_per_node", "2", "python", "x.py"], "unknown option --nproc_per_node: did you mean -np?"),
    (["--nproc-per-node=2", "python", "x.py"], "unknown option --nproc-per-node: did you mean -np?"),
    (["-np", "2", "--timeline-filename", "/nonexistent-dir/trace.json", "python", "x.py"],
     "--timeline-filename /nonexistent-dir/trace.json: the directory /nonexistent-dir does not exist"),
])
def test_an_unknown_option_is_named_wherever_it_stands(args, message):
    result = horarun(*args)
    assert result.returncode == 2
    assert f"horarun: error: {message}" in result.stderr, result.stderr
    assert "required" not in result.stderr
    assert result.stdout == ""


def test_options_after_the_command_are_the_commands():
    result = horarun("-np", "1", "-Hlocalhost:1", sys.executable, "-c", "import sys; print(sys.argv[1:])",
                     "--bogus", "-np", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0]:['--bogus', '-np', '3']\n"
    result = horarun("-np", "1", "--", sys.executable, "-c", "print('ran')")
    assert result.stdout == "[0]:ran\n", result.stderr


def test_version_is_the_installed_packages():
    result = horarun("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"horarun (hora) {importlib.metadata.version('hora')}\n"


def variables_read_by_the_core():
    """The HORA_ and HOROVOD_ names src/util/env.cc reads."""
    with open(os.path.join(REPO, "src", "util", "env.cc")) as f:
        return set(re.findall(r'"((?:HORA|HOROVOD)_[A-Z_]+)"', f.read()))


def documented_names():
    names = set()
    for name, horovod_name, meaning, _ in usage.ENVIRONMENT:
        names |= {name, horovod_name} | set(re.findall(r"(?:HORA|HOROVOD)_[A-Z_]+", meaning))
    return names - {None}


def test_every_variable_the_core_reads_is_documented():
    set_by_launcher = {prefix + name for prefix in ("HORA_", "HOROVOD_") for name in usage.SET_BY_LAUNCHER}
    undocumented = variables_read_by_the_core() - documented_names() - set_by_launcher
    assert not undocumented, f"add these to hora/runner/usage.py ENVIRONMENT and docs/launcher.md: {undocumented}"


def test_help_has_an_example_and_the_environment_variables():
    result = horarun("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "examples:\n  horarun -np 4 python train.py\n" in text
    assert "--keep-going" in text and "--version" in text
    for name in documented_names():
        assert name in text, name
    assert "docs/launcher.md" in text


def test_the_docs_table_lists_the_same_variables():
    with open(os.path.join(REPO, "docs", "launcher.md")) as f:
        docs = f.read()
    for name in documented_names():
        assert f"`{name}`" in docs, name
