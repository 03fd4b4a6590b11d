"""The README's commands work as written: each line of its `sh` blocks runs,
from the repository root, in a fresh shell with no virtual environment
activated (tests/python/documented_commands.py), and succeeds. Its `python`
blocks run too, each as a script on 4 ranks.

Not run here: `make demo` and `make test`, which build everything this test
needs and so have run before it (make test runs it), and `make bench`, the
full benchmark (minutes); the README's quick benchmark line below it is run.
"""

import os

import pytest

from documented_commands import (REPO, describe, docstring_command, fenced_blocks, repository_root,
                                 run_as_written, shell_commands)

with open(os.path.join(REPO, "README.md")) as readme:
    README = readme.read()

NOT_RUN = ("make demo", "make test", "make bench")
# What some commands must print besides succeeding.
EXPECTED_OUTPUT = {
    "examples/seed_numpy.py": "sum of ranks",
    "examples/hpo.py": "hpo.png: Learning-rate search",
    "benchmarks/allreduce.py": "torch/hora",
}
# Every example run from the README trains this many steps (its --steps
# default); the command line stays as written.
QUICK = {"HORA_EXAMPLE_STEPS": "20"}


def commands_to_run():
    return [command for command in shell_commands(README) if command not in NOT_RUN]


def test_no_other_make_target_is_run_here():
    # A make target builds in the checkout's own build folders: add a new one
    # to NOT_RUN (with the reason above) rather than run it from this test.
    assert [command for command in commands_to_run() if command.split()[0] == "make"] == []


def test_every_code_block_says_what_it_holds():
    # An untagged block could hold commands that this test would not run.
    languages = [language for language, _ in fenced_blocks(README)]
    assert languages and all(language in ("sh", "python", "text") for language in languages), languages


def test_the_commands_left_out_are_in_the_readme():
    commands = shell_commands(README)
    for command in NOT_RUN:
        assert command in commands, f"{command!r} is no longer in the README: take it out of NOT_RUN"
    assert len(commands_to_run()) >= 3, commands


def test_commands_name_the_venvs_programs():
    # A fresh shell has no `horarun` or venv `python` on its PATH.
    for command in commands_to_run():
        program = command.split()[0]
        assert program.startswith(".venv/bin/"), command
        if program.endswith("/horarun"):
            assert " .venv/bin/python " in command, command


def test_examples_in_the_readme_are_written_as_their_docstrings_say():
    commands = shell_commands(README)
    for example in ("seed_numpy", "hpo"):
        assert docstring_command(example) in commands, example


@pytest.mark.parametrize("command", [command for command in commands_to_run() if command.split()[0] != "make"])
def test_readme_command_runs_as_written(command, tmp_path):
    root = repository_root(str(tmp_path / "repo"))
    result = run_as_written(command, root, **QUICK)
    assert result.returncode == 0, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    for fragment, output in EXPECTED_OUTPUT.items():
        if fragment in command:
            assert output in result.stdout, describe(result)


PYTHON_BLOCKS = [text for language, text in fenced_blocks(README) if language == "python"]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"python block {i}" for i in range(len(PYTHON_BLOCKS))])
def test_readme_python_block_runs_on_four_ranks(block, tmp_path):
    root = repository_root(str(tmp_path / "repo"))
    with open(os.path.join(root, "readme_block.py"), "w") as script:
        script.write(block)
    result = run_as_written(".venv/bin/horarun -np 4 .venv/bin/python readme_block.py", root)
    assert result.returncode == 0, describe(result) + "\nthe block:\n" + block
