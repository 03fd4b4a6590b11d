"""``horarun --mpi``: runs the job through the MPI launcher (mpirun) instead
of starting the ranks itself.

hora needs nothing from horarun under MPI: each rank learns its place from
the launcher's environment, and rank 0 serves the job's store. horarun only
writes the mpirun command line, adding what running as root and more ranks
than cores need, and forwarding hora's and Horovod's variables to remote
hosts.
"""

import os
import shlex
import shutil
import subprocess
import sys

from hora.runner import env as rank_env

# Variables every rank gets besides HORA_* and HOROVOD_* (as over ssh).
FORWARDED_NAMES = rank_env.FORWARDED_NAMES + ("PYTHONUNBUFFERED",)


def launcher_flavour(mpirun):
    """"openmpi" or "mpich" (Hydra), from the launcher's --version."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
        text = out.stdout + out.stderr
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    if "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text or "Intel" in text:
        return "mpich"
    return "openmpi"


def forwarded_names(environ):
    return sorted(name for name in environ
                  if name in FORWARDED_NAMES or name.startswith(rank_env.FORWARDED_PREFIXES))


class LauncherOptionError(ValueError):
    """An option of horarun that this MPI launcher cannot carry out."""


def _ssh_arguments(args):
    parts = []
    if getattr(args, "ssh_port", None) is not None:
        parts += ["-p", str(args.ssh_port)]
    if getattr(args, "ssh_identity_file", None):
        parts += ["-i", args.ssh_identity_file]
    return shlex.join(parts)


def mpirun_command(args, mpirun, flavour, environ, is_root):
    """The command that runs ``args.command`` as ``args.num_proc`` ranks."""
    cmd = [mpirun]
    names = forwarded_names(environ)
    ssh_arguments = _ssh_arguments(args)
    output_filename = getattr(args, "output_filename", None)
    timestamps = getattr(args, "prefix_output_with_timestamp", False)
    if flavour == "openmpi":
        if is_root:
            cmd.append("--allow-run-as-root")
        # horarun never limits ranks to cores, and marks each line with its rank.
        cmd += ["--oversubscribe", "--tag-output", "-np", str(args.num_proc)]
        if args.hosts:
            cmd += ["-H", args.hosts]
        elif args.hostfile:
            cmd += ["--hostfile", args.hostfile]
        for name in names:
            cmd += ["-x", name]
        if ssh_arguments:
            cmd += ["--mca", "plm_rsh_args", ssh_arguments]
        if getattr(args, "launch_agent", None):
            cmd += ["--mca", "plm_rsh_agent", args.launch_agent]
        if output_filename:
            cmd += ["--output-filename", output_filename]
        if timestamps:
            cmd.append("--timestamp-output")
        interfaces = getattr(args, "network_interfaces", None)
        if interfaces:
            # MPI's own TCP traffic on them too, as horovodrun does.
            cmd += ["--mca", "btl_tcp_if_include", interfaces, "--mca", "oob_tcp_if_include", interfaces]
    else:
        for option, given in (("--ssh-port/--ssh-identity-file", ssh_arguments),
                              ("--launch-agent", getattr(args, "launch_agent", None)),
                              ("--output-filename", output_filename),
                              ("--prefix-output-with-timestamp", timestamps)):
            if given:
                raise LauncherOptionError(f"{option} is not supported with MPICH's launcher; "
                                          "pass the launcher's own option in --mpi-args")
        cmd += ["-prepend-rank", "-n", str(args.num_proc)]
        if args.hosts:
            cmd += ["-hosts", args.hosts]
        elif args.hostfile:
            cmd += ["-f", args.hostfile]
        if names:
            cmd += ["-genvlist", ",".join(names)]
    cmd += shlex.split(args.mpi_args or "")
    return cmd + list(args.command)


def run(args, extra_env=None, replace_process=True):
    """Runs the job under mpirun; returns its exit status. By default horarun
    becomes mpirun (which supervises the ranks and passes on signals);
    with `replace_process` False it waits for mpirun instead (hora.runner.run).
    `extra_env` is added to every rank's environment."""
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        print("horarun: --mpi needs mpirun (Debian: apt-get install openmpi-bin)", file=sys.stderr)
        return 127
    environ = dict(os.environ)
    environ.setdefault("PYTHONUNBUFFERED", "1")
    environ.update(extra_env or {})
    try:
        cmd = mpirun_command(args, mpirun, launcher_flavour(mpirun), environ, os.geteuid() == 0)
    except LauncherOptionError as error:
        if not replace_process:
            raise
        print(f"horarun: {error}", file=sys.stderr)
        return 2
    if args.verbose:
        print(f"horarun: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if not replace_process:
        return subprocess.run(cmd, env=environ).returncode
    os.execvpe(cmd[0], cmd, environ)
