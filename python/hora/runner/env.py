"""The environment horarun gives each rank, and the shell command that starts a
rank on a remote host.

A remote rank's variables travel on ssh's command line, except its secrets
(every variable whose name ends in _SECRET): those would be readable there
by anyone on either host (`ps`), so the remote script reads them, one per
line, from the start of its standard input, which the launcher writes
first (secret_input)."""

import os
import re
import shlex

from hora.runner import monitor as job_monitor

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


def is_secret(name):
    """Whether variable `name` holds a secret, kept off every command line."""
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*_SECRET", name) is not None


def remote_environment(rank_env, base=None):
    """The variables a remote rank gets (remote_script puts those that are
    not secrets on the ssh command line)."""
    base = os.environ if base is None else base
    env = {name: value for name, value in base.items()
           if name in FORWARDED_NAMES or name.startswith(FORWARDED_PREFIXES)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(rank_env)
    return env


def _secret_names(env):
    return sorted(name for name in env if is_secret(name))


def secret_input(env):
    """What the launcher writes first to the remote script's stdin: the
    values of `env`'s secrets, one line each, in the order the script reads
    them. ValueError for a secret that is not one line."""
    values = [env[name] for name in _secret_names(env)]
    for name, value in zip(_secret_names(env), values):
        if "\n" in value or "\r" in value:
            raise ValueError(f"{name} must be one line of text to reach a remote rank")
    return "".join(value + "\n" for value in values).encode()


def remote_script(cwd, env, command):
    """A POSIX shell script that runs `command` in `cwd` with `env` and stops it
    (SIGTERM) when its stdin closes, so that ending the ssh session ends the
    rank. Exits with the command's status. The secrets of `env` are not in
    it: the script reads them from the first lines of its stdin
    (secret_input), then watches the rest."""
    secrets = _secret_names(env)
    reads = "".join(f"IFS= read -r {name} || exit 1\nexport {name}\n" for name in secrets)
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()) if k not in secrets)
    run = f"env {assignments} {shlex.join(command)}"
    return (
        reads +
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


def job_environment(args):
    """The variables horarun's options set for every rank: the timeline's
    (a relative path made absolute here, where horarun runs), the
    monitor's publishing interval and the network interfaces."""
    variables = {}
    if args.timeline_filename:
        path = os.path.abspath(args.timeline_filename)
        # Both names, so that the flag wins over either variable in horarun's environment.
        variables.update(HORA_TIMELINE=path, HOROVOD_TIMELINE=path)
    if args.timeline_mark_cycles:
        variables.update(HORA_TIMELINE_MARK_CYCLES="1", HOROVOD_TIMELINE_MARK_CYCLES="1")
    if args.monitor is not None:
        variables[job_monitor.INTERVAL_VARIABLE] = f"{args.monitor:g}"
    if getattr(args, "network_interfaces", None):
        variables["HORA_NETWORK_INTERFACES"] = args.network_interfaces
    return variables
