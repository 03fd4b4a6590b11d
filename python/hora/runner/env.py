"""The environment horarun gives each rank, and the shell command that starts a
rank on a remote host."""

import os
import shlex

# Variables of the launching environment that remote ranks also get, besides
# every HORA_* and HOROVOD_* variable (configuration such as
# HOROVOD_FUSION_THRESHOLD).
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS")
FORWARDED_PREFIXES = ("HORA_", "HOROVOD_")

# Ranks that share a host get one OpenMP thread each unless the user chose
# a number (as torchrun's workers do): otherwise every rank that imports
# numpy or torch starts a math-library thread pool as large as the host,
# whose spinning threads delay hora's own on a busy host.
THREADS_VARIABLE = "OMP_NUM_THREADS"
THREADS_NOTE = (f"horarun: setting {THREADS_VARIABLE}=1 for ranks that share a host, so that their "
                f"math libraries' threads do not compete for its cores; set {THREADS_VARIABLE} "
                f"in horarun's environment to choose another number")


def thread_default(placements, chosen):
    """{"OMP_NUM_THREADS": "1"} when some host runs more than one of
    `placements` and the user has not chosen a number (`chosen`: the
    variables the user set), else {}."""
    if THREADS_VARIABLE in chosen or all(p.local_size <= 1 for p in placements):
        return {}
    return {THREADS_VARIABLE: "1"}


def rank_environment(placement, *, hostname, rendezvous_addr, rendezvous_port, secret,
                     start_timeout):
    """Returns the variables that tell one rank who it is and where the job's
    rendezvous server is, under hora's names and Horovod's."""
    coordinates = {
        "RANK": placement.rank,
        "SIZE": placement.size,
        "LOCAL_RANK": placement.local_rank,
        "LOCAL_SIZE": placement.local_size,
        "CROSS_RANK": placement.cross_rank,
        "CROSS_SIZE": placement.cross_size,
        "HOSTNAME": hostname,
    }
    env = {}
    for name, value in coordinates.items():
        env["HORA_" + name] = str(value)
        env["HOROVOD_" + name] = str(value)
    env.update({
        "HORA_RENDEZVOUS_ADDR": rendezvous_addr,
        "HORA_RENDEZVOUS_PORT": str(rendezvous_port),
        "HORA_SECRET": secret,
        "HORA_START_TIMEOUT": str(start_timeout),
    })
    return env


def local_environment(rank_env, base=None):
    """The full environment of a rank spawned on this machine. Python ranks
    write unbuffered so that their lines reach horarun as they are printed."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(rank_env)
    return env


def remote_environment(rank_env, base=None):
    """The variables passed on the ssh command line of a remote rank."""
    base = os.environ if base is None else base
    env = {name: value for name, value in base.items()
           if name in FORWARDED_NAMES or name.startswith(FORWARDED_PREFIXES)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(rank_env)
    return env


def remote_script(cwd, env, command):
    """A POSIX shell script that runs `command` in `cwd` with `env` and stops it
    (SIGTERM) when its stdin closes, so that ending the ssh session ends the
    rank. Exits with the command's status."""
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
    run = f"env {assignments} {shlex.join(command)}"
    return (
        f"cd {shlex.quote(cwd)} || exit 1\n"
        "exec 3<&0\n"
        f"{run} 3<&- </dev/null &\n"
        "pid=$!\n"
        "{ cat <&3 >/dev/null 2>&1; kill -TERM $pid 2>/dev/null; } >/dev/null 2>&1 &\n"
        "watcher=$!\n"
        "exec 3<&-\n"
        "wait $pid\n"
        "status=$?\n"
        "kill $watcher 2>/dev/null\n"
        "exit $status\n"
    )
