"""The commands that the README and the examples' docstrings give, run as a
newcomer runs them: as written, from the repository root, in a fresh shell
with no virtual environment activated.

"From the repository root" is a directory holding a link to each of the
repository's top-level entries, so that what a command writes there (an
example's PNG) lands in the test's own directory, not in the checkout.
"""

import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(REPO, "examples")

# The variables a fresh login shell has; nothing of the test's own
# environment (its venv, PYTHONPATH, HORA_* settings) passes.
FRESH_SHELL_VARIABLES = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "SHELL")
# How the examples' docstrings give their command: an indented line after the
# paragraph that says to run it from the repository root.
DOCSTRING_COMMAND = re.compile(r"^ {4}(\.venv\S*/bin/(?:horarun|python) .+)$", re.MULTILINE)
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# A comment at the end of a command line: blanks, then '# '.
TRAILING_COMMENT = re.compile(r"\s+#\s.*$")


def fenced_blocks(markdown):
    """(language, text) of every fenced code block of a Markdown text."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(markdown)]


def shell_commands(markdown):
    """The commands of the `sh` blocks, one per line (a line ending in a
    backslash continues on the next), without comments and blank lines."""
    commands = []
    for language, text in fenced_blocks(markdown):
        if language != "sh":
            continue
        for line in text.replace("\\\n", " ").splitlines():
            command = TRAILING_COMMENT.sub("", line).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def docstring_command(example):
    """The command examples/<example>.py's docstring gives to run it."""
    with open(os.path.join(EXAMPLES, f"{example}.py")) as source:
        text = source.read()
    docstring = text.split('"""')[1]
    commands = DOCSTRING_COMMAND.findall(docstring)
    assert len(commands) == 1, f"examples/{example}.py: its docstring gives {len(commands)} commands to run it"
    return commands[0]


def fresh_shell_environment(**variables):
    """A fresh shell's environment: PATH without any directory of the
    repository (so without .venv/bin), no VIRTUAL_ENV, no variable the test
    run set; plus ``variables``."""
    environment = {name: os.environ[name] for name in FRESH_SHELL_VARIABLES if name in os.environ}
    repo = os.path.realpath(REPO)
    path = [entry for entry in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if entry and not os.path.realpath(entry).startswith(repo + os.sep)]
    environment["PATH"] = os.pathsep.join(path)
    environment.update(variables)
    return environment


def repository_root(directory):
    """``directory``, made to look like the repository's root: a link to each
    of its top-level entries."""
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(REPO):
        if not name.endswith(".png"):
            os.symlink(os.path.join(REPO, name), os.path.join(directory, name))
    return directory


def run_as_written(command, root, timeout=150, **variables):
    """Runs ``command`` with bash (no startup files) in ``root``, in a fresh
    shell's environment plus ``variables``; returns the CompletedProcess."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", command], cwd=root, capture_output=True,
                          text=True, timeout=timeout, env=fresh_shell_environment(**variables))


def describe(result):
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
