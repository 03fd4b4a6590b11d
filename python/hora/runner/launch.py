"""horarun: starts a job's ranks on this machine or over ssh and supervises them.

    horarun -np 4 python train.py
    horarun -np 8 -H a:4,b:4 python train.py
    horarun --mpi -np 4 python train.py      # through mpirun (see mpi_run.py)

One rendezvous server runs inside horarun for the job's lifetime. Every output
line of a rank is prefixed with '[rank]:'. When a rank fails, the others get
a second to end on their own, then are stopped; at the end horarun names the
rank that failed first, shows the end of its stderr, lists the ranks that
failed because of it (failures.py) and exits with its status. With
--keep-going the others run on (a failed rank breaks only the process sets
that contain it); horarun then reports every rank's exit status as well.
Unknown options, --help and --version: usage.py. Each rank's process, its
output forwarding and signals, and the watchdog: processes.py. At the end,
horarun removes the shared-memory segments that the job recorded in its
store and left on this machine (shm_leftovers.py). Ranks that share a host get
OMP_NUM_THREADS=1 unless it is set (env.py).

horarun tells the ranks, through its store, that it watches their processes
and how each one ended (PROCESS_WATCH_KEY, process_key()), so that a rank
waiting for a peer that never called hvd.init() can say whether that peer is
alive. --timeline-filename and --monitor: see job_environment() and
monitor.py.
"""

import argparse
import os
import queue
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

from hora.runner import elastic
from hora.runner import env as rank_env
from hora.runner import failures
from hora.runner import hosts as host_list
from hora.runner import monitor as job_monitor
from hora.runner import mpi_run
from hora.runner import shm_leftovers
from hora.runner import usage
from hora.runner.env import job_environment
from hora.runner.processes import RankProcess, Watchdog, print_own_lines, rank_output_dir, remote_command
from hora.runner.rendezvous import RendezvousServer

# Seconds between SIGTERM and SIGKILL when horarun stops ranks.
TERMINATE_GRACE_SECONDS = 5.0
# Seconds the other ranks get to exit on their own after the first failure,
# before horarun stops them: the rank that caused it often exits after the
# ranks it broke, and should report its own error and status.
STOP_DELAY_SECONDS = 1.0
DEFAULT_START_TIMEOUT = 30.0
# Read by the core (src/runtime/set_presence.h): set while horarun watches
# the ranks' processes, and how rank r's process ended.
PROCESS_WATCH_KEY = "hora.launcher.watch"


def process_key(rank):
    return f"hora.process.{rank}"


class _RefusingParser(argparse.ArgumentParser):
    """A parser for callers that are not a command line (hora.runner.run):
    bad arguments raise ValueError instead of exiting."""

    def error(self, message):
        raise ValueError(message)


def parse_args(argv, raise_errors=False):
    """horarun's arguments; a bad one exits with status 2 and a usage line,
    or raises ValueError when `raise_errors` is set."""
    parser = (_RefusingParser if raise_errors else argparse.ArgumentParser)(
        prog="horarun", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs a command as the ranks of one hora job.", epilog=usage.epilog())
    parser.add_argument("--version", action="version", version=f"horarun (hora) {usage.version()}",
                        help="print hora's version and exit")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int,
                        help="number of ranks (elastic: the workers to wait for before the first round, "
                             "the default of --min-np and --max-np)")
    parser.add_argument("-H", "--hosts", help="hosts and their slots: a:4,b:4 (default: "
                                              "this machine with -np slots)")
    parser.add_argument("--hostfile", help="file with one 'host slots=N' per line")
    parser.add_argument("--start-timeout", type=float,
                        help="seconds the ranks may take to reach each other and the rendezvous "
                             f"(default: $HORA_START_TIMEOUT or $HOROVOD_START_TIMEOUT, else "
                             f"{DEFAULT_START_TIMEOUT:g}); also the ssh connect timeout")
    parser.add_argument("--rendezvous-addr",
                        help="address remote ranks use to reach this machine (default: "
                             "the address that routes to the first remote host)")
    parser.add_argument("--mpi", action="store_true",
                        help="run the job through mpirun (the MPI backend by default) instead of "
                             "starting the ranks here")
    parser.add_argument("--mpi-args", help="extra mpirun arguments, as one string (with --mpi)")
    parser.add_argument("--keep-going", action="store_true",
                        help="when a rank fails, let the others finish instead of stopping them; "
                             "report every rank's exit status at the end")
    parser.add_argument("--ssh-port", type=int, help="ssh port on the remote hosts")
    parser.add_argument("--ssh-identity-file", help="ssh identity (private key) file for the remote hosts")
    parser.add_argument("--launch-agent", metavar="AGENT",
                        help="start remote ranks with AGENT instead of ssh: the command 'AGENT HOST COMMAND' "
                             "(AGENT split as a shell would; standard input kept, as ssh does) - e.g. "
                             "srun's or kubectl's wrapper, or 'scripts/cluster.sh exec' for simulated hosts "
                             "(under --mpi: Open MPI's plm_rsh_agent)")
    parser.add_argument("--output-filename", metavar="DIR",
                        help="also write each rank's output to DIR/rank.<rank>/stdout and stderr")
    parser.add_argument("--prefix-output-with-timestamp", action="store_true",
                        help="start every output line with the time it was printed")
    parser.add_argument("--timeline-filename", metavar="PATH",
                        help="record a timeline (Chrome trace) into PATH from hvd.init() on "
                             "(HOROVOD_TIMELINE for every rank; relative to this directory)")
    parser.add_argument("--timeline-mark-cycles", action="store_true",
                        help="mark each batch of work in the timeline (HOROVOD_TIMELINE_MARK_CYCLES)")
    parser.add_argument("--monitor", nargs="?", type=float, const=job_monitor.DEFAULT_INTERVAL,
                        metavar="SECONDS",
                        help="print every SECONDS (default %(const)g) one line per process set (ops/s, "
                             "GB/s, slowest member, stalls) and a per-set summary at the end")
    parser.add_argument("--network-interfaces", metavar="IFACES",
                        help="network interfaces for the ranks' traffic, comma-separated, in order of "
                             "preference (each rank listens on the first its host has; "
                             "HORA_NETWORK_INTERFACES)")
    elastic = parser.add_argument_group("elastic training (docs/elastic.md)")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int,
                         help="the fewest workers the job runs with (default: -np)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int,
                         help="the most workers the job runs (default: -np, else no limit)")
    elastic.add_argument("--host-discovery-script", metavar="SCRIPT",
                         help="a command printing the usable hosts, one 'host' or 'host:slots' a line; run "
                              "every HORA_ELASTIC_DISCOVERY_INTERVAL seconds (1)")
    elastic.add_argument("--slots-per-host", type=int, help="slots of a host the script lists without any")
    elastic.add_argument("--elastic-timeout", type=float, default=600.0, metavar="SECONDS",
                         help="how long the job may have fewer than --min-np workers, and how long a worker "
                              "waits for a round that includes it (default 600)")
    elastic.add_argument("--reset-limit", type=int, help="stop after this many changes of the workers")
    elastic.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                         help="a host whose worker failed gets no new workers for a random time in this "
                              "range of seconds (default: for good)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the placement of ranks and the commands run")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs")
    argv = usage.with_optional_values(parser, argv)
    unknown = usage.first_unknown_option(parser, argv)
    if unknown is not None and not {"-h", "--help", "--version"} & set(argv):
        parser.error(usage.unknown_option_message(unknown))
    return _checked(parser.parse_args(argv), parser)


def _checked_elastic(args, parser):
    """The checks of an elastic job's flags (Horovod's meanings)."""
    if args.host_discovery_script is None:
        parser.error("an elastic job (--min-np/--max-np) needs --host-discovery-script")
    for flag in ("mpi", "keep_going", "hosts", "hostfile", "monitor"):
        if getattr(args, flag, None):
            parser.error(f"--{flag.replace('_', '-')} does not apply to an elastic job")
    args.min_np = args.min_np if args.min_np is not None else args.num_proc or 1
    args.max_np = args.max_np if args.max_np is not None else args.num_proc or 1 << 30
    if args.min_np < 1:
        parser.error(f"--min-np must be at least 1, got {args.min_np}")
    if args.max_np < args.min_np:
        parser.error(f"--max-np {args.max_np} is below --min-np {args.min_np}")
    if args.num_proc is not None and not args.min_np <= args.num_proc <= args.max_np:
        parser.error(f"-np {args.num_proc} is outside --min-np {args.min_np} .. --max-np {args.max_np}")
    if args.slots_per_host is not None and args.slots_per_host < 1:
        parser.error(f"--slots-per-host must be at least 1, got {args.slots_per_host}")
    if args.elastic_timeout <= 0:
        parser.error(f"--elastic-timeout must be positive, got {args.elastic_timeout:g}")
    if args.reset_limit is not None and args.reset_limit < 0:
        parser.error(f"--reset-limit must not be negative, got {args.reset_limit}")
    cooldown = args.blacklist_cooldown_range
    if cooldown is not None and not 0 <= cooldown[0] <= cooldown[1]:
        parser.error(f"--blacklist-cooldown-range needs 0 <= MIN <= MAX, got {cooldown[0]:g} {cooldown[1]:g}")
    if args.start_timeout is None:
        args.start_timeout = _start_timeout_from_environment(parser)
    args.placements = []
    return args


def _checked(args, parser):
    """`args` with their placements, after the checks argparse cannot make."""
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command to run")
    args.elastic = any(value is not None for value in (args.min_np, args.max_np, args.host_discovery_script))
    if args.elastic:
        return _checked_elastic(args, parser)
    if args.num_proc is None:
        parser.error("-np is required (or the elastic flags --min-np/--max-np and --host-discovery-script)")
    if args.num_proc <= 0:
        parser.error(f"-np must be at least 1, got {args.num_proc}")
    for flag, value in (("--slots-per-host", args.slots_per_host), ("--reset-limit", args.reset_limit),
                        ("--blacklist-cooldown-range", args.blacklist_cooldown_range)):
        if value is not None:
            parser.error(f"{flag} applies to elastic jobs only (--host-discovery-script, --min-np, --max-np)")
    if args.keep_going and getattr(args, "mpi", False):
        parser.error("--keep-going needs horarun's own launcher; mpirun stops the job at the first failure")
    if args.hosts and args.hostfile:
        parser.error("give either -H or --hostfile, not both")
    if args.start_timeout is None:
        args.start_timeout = _start_timeout_from_environment(parser)
    if args.start_timeout <= 0:
        parser.error(f"--start-timeout must be positive, got {args.start_timeout}")
    if args.monitor is not None and not 0 < args.monitor < float("inf"):
        parser.error(f"--monitor takes a positive number of seconds, got {args.monitor:g}")
    if args.monitor is not None and getattr(args, "mpi", False):
        parser.error("--monitor needs horarun's own launcher; under --mpi horarun does not run the job's store")
    if args.network_interfaces is not None and not [name for name in args.network_interfaces.split(",") if name]:
        parser.error("--network-interfaces names no interface")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        parser.error(f"--ssh-port must be a port number (1..65535), got {args.ssh_port}")
    if args.launch_agent is not None:
        _check_launch_agent(parser, args)
    try:
        if args.hosts:
            hosts = host_list.parse_host_list(args.hosts)
        elif args.hostfile:
            hosts = host_list.parse_hostfile(args.hostfile)
        else:
            hosts = [host_list.Host("localhost", args.num_proc)]
        args.placements = host_list.place_ranks(hosts, args.num_proc)
    except host_list.HostSpecError as error:
        parser.error(str(error))
    if not all(host_list.is_local(p.host) for p in args.placements):
        try:
            rank_env.secret_input(rank_env.remote_environment({}))   # each secret must be one line for ssh
        except ValueError as error:
            parser.error(str(error))
    if args.timeline_filename and all(host_list.is_local(p.host) for p in args.placements):
        directory = os.path.dirname(os.path.abspath(args.timeline_filename))
        if not os.path.isdir(directory):
            parser.error(f"--timeline-filename {args.timeline_filename}: the directory {directory} does not "
                         "exist; create it first")
    return args


def _check_launch_agent(parser, args):
    """--launch-agent names a program that is there, and no ssh option comes with it."""
    try:
        words = shlex.split(args.launch_agent)
    except ValueError as error:
        parser.error(f"--launch-agent {args.launch_agent!r}: {error}")
    if not words:
        parser.error("--launch-agent names no program")
    if shutil.which(words[0]) is None:
        parser.error(f"--launch-agent {args.launch_agent!r}: no program {words[0]!r} found")
    for option, given in (("--ssh-port", args.ssh_port), ("--ssh-identity-file", args.ssh_identity_file)):
        if given is not None:
            parser.error(f"{option} is an option of ssh; with --launch-agent, give the agent its own options")


def _start_timeout_from_environment(parser):
    """--start-timeout's default: the variable the ranks would read, else 30 s."""
    for name in ("HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT"):
        text = os.environ.get(name, "").strip()
        if text:
            try:
                return float(text)
            except ValueError:
                parser.error(f"{name}={text!r} is not a number of seconds")
    return DEFAULT_START_TIMEOUT


describe_exit = failures.describe_exit


def rendezvous_address(args):
    """(bind address, address ranks reach this machine at) for the job."""
    placements = args.placements
    if all(host_list.is_local(p.host) for p in placements):
        return "127.0.0.1", "127.0.0.1"
    first_remote = next(p.host for p in placements if not host_list.is_local(p.host))
    return "0.0.0.0", args.rendezvous_addr or host_list.outward_address(first_remote)


class Job:
    """Starts every rank, then waits for them: the first failure or a signal
    to horarun stops the rest. run() returns horarun's exit status.
    `extra_env` is added to every rank's environment, after the variables
    of horarun's options (job_environment())."""

    def __init__(self, args, extra_env=None):
        self.args = args
        self.extra_env = {**job_environment(args), **(extra_env or {})}
        self.placements = args.placements
        self.local_only = all(host_list.is_local(p.host) for p in self.placements)
        self.thread_default = rank_env.thread_default(self.placements, {**os.environ, **self.extra_env})
        self.secret = secrets.token_hex(16)
        self.ranks = []
        self.exits = queue.Queue()
        self.received_signal = None
        self.kill_deadline = None
        self.server = None
        self.monitor = None

    def run(self):
        bind, address = rendezvous_address(self.args)
        server = self.server = RendezvousServer(bind, 0, self.secret).start()
        server.set_value(PROCESS_WATCH_KEY, "1")
        if self.args.monitor is not None:
            self.monitor = job_monitor.JobMonitor(server, self.args.monitor, print_own_lines)
        watchdog = Watchdog()
        if self.thread_default:
            print(rank_env.THREADS_NOTE, file=sys.stderr, flush=True)
        try:
            for placement in self.placements:
                if self.received_signal is not None:
                    return 128 + self.received_signal
                rank = self._start_rank(placement, address, server.port, watchdog.watch)
                self.ranks.append(rank)
                # A signal forwarded while this rank was starting (its output
                # may already be out) missed it: it gets the signal now.
                if self.received_signal is not None and rank.signalled_at is None:
                    rank.send_signal(self.received_signal)
            if self.monitor is not None:
                self.monitor.start()
            return self._supervise()
        finally:
            if self.monitor is not None:
                self.monitor.stop()
            self._stop_ranks(signal.SIGKILL)
            watchdog.release()
            self._remove_leftover_segments(server)
            server.stop()

    def _remove_leftover_segments(self, server):
        """Removes the shared-memory segments the job recorded in its store
        and left on this machine (see shm_leftovers.py), once every local
        rank has exited."""
        local = [rank for rank in self.ranks if not rank.remote]
        for rank in local:
            try:
                rank.popen.wait(timeout=TERMINATE_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                return   # a rank still runs and may use them
        if not local:
            return
        names = shm_leftovers.recorded_segment_names(
            server.values_of_keys_ending_with(shm_leftovers.SEGMENT_RECORD_SUFFIX))
        removed = shm_leftovers.remove_segments(names)
        if removed:
            print(f"horarun: removed {len(removed)} shared-memory segment(s) the job left in "
                  f"{shm_leftovers.SEGMENT_DIRECTORY}: {', '.join(removed)}", file=sys.stderr, flush=True)

    def _hostname(self, placement, rendezvous_addr):
        if self.local_only:
            return "127.0.0.1"
        return rendezvous_addr if host_list.is_local(placement.host) else placement.host

    def _start_rank(self, placement, rendezvous_addr, port, on_start):
        variables = rank_env.rank_environment(
            placement, hostname=self._hostname(placement, rendezvous_addr),
            rendezvous_addr=rendezvous_addr, rendezvous_port=port, secret=self.secret,
            start_timeout=self.args.start_timeout)
        if placement.local_size > 1:
            variables.update(self.thread_default)
        variables.update(self.extra_env)
        command = self.args.command
        first_input = b""
        if host_list.is_local(placement.host):
            argv, environ, remote = command, rank_env.local_environment(variables), False
        else:
            remote_variables = rank_env.remote_environment(variables)
            script = rank_env.remote_script(os.getcwd(), remote_variables, command)
            argv = remote_command(placement.host, script, self.args)
            environ, remote = None, True
            first_input = rank_env.secret_input(remote_variables)
        if self.args.verbose:
            how = (f"{self.args.launch_agent or 'ssh'} {placement.host}") if remote else "local"
            print(f"horarun: rank {placement.rank} on {placement.host} (local rank "
                  f"{placement.local_rank}/{placement.local_size}, cross rank "
                  f"{placement.cross_rank}/{placement.cross_size}, {how}): "
                  f"{shlex.join(command)}", file=sys.stderr, flush=True)
        output_dir = None
        if self.args.output_filename:
            output_dir = rank_output_dir(self.args.output_filename, placement.rank, placement.size)
        try:
            return RankProcess(placement, argv, environ, self.exits, remote, on_start, output_dir,
                               self.args.prefix_output_with_timestamp, first_input)
        except OSError as error:
            raise SystemExit(f"horarun: cannot start rank {placement.rank}: {error}") from None

    def _supervise(self):
        """Waits for every rank; returns horarun's exit status."""
        running = len(self.ranks)
        failed = False
        stop_at = None
        while running:
            now = time.monotonic()
            if stop_at is not None and now > stop_at and self.kill_deadline is None:
                self._begin_stopping(signal.SIGTERM)
            if self.kill_deadline and now > self.kill_deadline:
                self._stop_ranks(signal.SIGKILL)
            try:
                rank, code = self.exits.get(timeout=0.1)
            except queue.Empty:
                continue
            running -= 1
            self.server.set_value(process_key(rank.rank), describe_exit(code))
            if self.args.verbose:
                print(f"horarun: rank {rank.rank} {describe_exit(code)}",
                      file=sys.stderr, flush=True)
            if code != 0 and not failed and self.received_signal is None:
                failed = True
                if not self.args.keep_going:
                    stop_at = time.monotonic() + STOP_DELAY_SECONDS
        for rank in self.ranks:
            rank.join_output(timeout=2.0)
        if self.monitor is not None:
            self.monitor.stop()
            print_own_lines(self.monitor.summary_lines())
        if self.received_signal is not None:
            print_own_lines([f"stopped by signal {self.received_signal}"])
            return 128 + self.received_signal
        summary = failures.Summary([rank.outcome() for rank in self.ranks])
        print_own_lines(summary.lines(self.args.keep_going))
        return summary.exit_status()

    def _begin_stopping(self, signum):
        if self.kill_deadline is None:
            self.kill_deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        self._stop_ranks(signum)

    def _stop_ranks(self, signum):
        for rank in self.ranks:
            if rank.popen.returncode is None:
                rank.send_signal(signum)

    def forward_signal(self, signum, _frame=None):
        """Signal handler: passes SIGINT/SIGTERM on to every rank; a second one
        kills them."""
        if self.received_signal is not None:
            self._stop_ranks(signal.SIGKILL)
            return
        self.received_signal = signum
        self._begin_stopping(signum)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.elastic:
        return elastic.main(args)
    if args.mpi:
        return mpi_run.run(args, extra_env=job_environment(args))
    job = Job(args)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, job.forward_signal)
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
