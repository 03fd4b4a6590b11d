"""What the benchmarks share: starting one job of N ranks (under horarun, or
under mpirun through ``horarun --mpi``) and reading back what each rank
printed as one ``{"RESULT": ...}`` JSON line."""

import json
import os
import shutil
import socket
import subprocess
import sys

# hora with its shared-memory path off.
NO_SHM = {"HORA_SHM": "0"}


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (torch's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpi_available():
    """Whether mpirun and mpi4py are both here (the mpi4py peers need them)."""
    if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
        return False
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def print_result(result):
    """A worker's answer: one line the launcher's output keeps whole."""
    print(json.dumps({"RESULT": result}), flush=True)


def run_job(np_, argv, extra_env=None, mpi=False, timeout=900, what="job", launcher_args=(), cwd=None):
    """Runs `argv` as `np_` ranks (horarun's `launcher_args` before -np)
    and returns the RESULT of every rank, in the order printed. Exits with
    the job's output if it failed or a rank printed no RESULT."""
    cmd = [sys.executable, "-m", "hora.runner"] + (["--mpi"] if mpi else []) + list(launcher_args)
    cmd += ["-np", str(np_)] + argv
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra_env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if out.returncode != 0:
        raise SystemExit(f"{what} on {np_} ranks failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    # A launcher prefixes each line with the rank, or may join lines.
    decoder, text, results = json.JSONDecoder(), out.stdout, []
    start = text.find('{"RESULT"')
    while start >= 0:
        result, end = decoder.raw_decode(text, start)
        results.append(result["RESULT"])
        start = text.find('{"RESULT"', end)
    if len(results) != np_:
        raise SystemExit(f"{what} on {np_} ranks printed {len(results)} results:\n{out.stdout}\n{out.stderr}")
    return results
