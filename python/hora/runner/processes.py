"""The processes of a job's ranks, for horarun and its elastic driver:
starting one on this machine or over ssh, forwarding its output line by line
with '[rank]:', signalling its process group, and the watchdog process that
stops the ranks if horarun itself is killed."""

import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from hora.runner import failures


# Keeps the lines of different ranks whole on our stdout and stderr.
_OUTPUT_LOCK = threading.Lock()

# A rank runs in a process group of its own (for signals) inside horarun's
# session: with the kernel's autogroup scheduling, a session of its own makes
# every rank a scheduling group of its own, and ranks that outnumber the cores
# then take turns on them more slowly. Not the terminal's foreground group, so
# a Ctrl-C reaches horarun alone, which stops the ranks. Python before 3.11
# cannot make a group without a session (no preexec_fn: horarun has threads).
_OWN_PROCESS_GROUP = ({"process_group": 0} if sys.version_info >= (3, 11)
                      else {"start_new_session": True})


def print_own_lines(lines):
    """Prints horarun's own `lines` on stderr, each after 'horarun: ',
    between the ranks' lines."""
    with _OUTPUT_LOCK:
        for line in lines:
            print(f"horarun: {line}", file=sys.stderr)
        sys.stderr.flush()


class _OutputForwarder:
    """Copies one stream of one rank to ours, line by line, with '[rank]:'
    (after the time, with `timestamps`), unprefixed to `copy`, an open
    binary file, when given, and into `tail` (a failures.StderrTail)."""

    def __init__(self, rank, source, sink, copy=None, timestamps=False, tail=None):
        self._prefix = f"[{rank}]:".encode()
        self._source = source
        # A text stream without a binary buffer (a notebook's) gets decoded lines.
        self._sink = getattr(sink, "buffer", None)
        self._text_sink = sink if self._sink is None else None
        self._copy = copy
        self._timestamps = timestamps
        self._tail = tail
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"horarun-output-{rank}")
        self.thread.start()

    def _run(self):
        for line in iter(self._source.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if self._tail is not None:
                self._tail.add(line, time.monotonic())
            prefix = self._prefix
            if self._timestamps:
                prefix = time.strftime("%Y-%m-%d %H:%M:%S ").encode() + prefix
            with _OUTPUT_LOCK:
                try:
                    if self._sink is not None:
                        self._sink.write(prefix + line)
                        self._sink.flush()
                    else:
                        self._text_sink.write((prefix + line).decode(errors="replace"))
                        self._text_sink.flush()
                except (OSError, ValueError):
                    pass   # our own stream is gone; keep draining the rank
            if self._copy is not None:
                self._copy.write(line)
                self._copy.flush()
        self._source.close()
        if self._copy is not None:
            self._copy.close()


class RankProcess:
    """One rank: its process (or ssh session), output forwarders and waiter.
    A remote rank's stdin gets `first_input` (its secrets, env.secret_input)
    and stays open: closing it stops the rank."""

    def __init__(self, placement, argv, environ, exits, remote, on_start, output_dir=None,
                 timestamps=False, first_input=b""):
        self.rank = placement.rank
        self.host = placement.host
        self.remote = remote
        self.stderr_tail = failures.StderrTail()
        self.exited_at = None
        self.signalled_at = None
        copies = [None, None]
        if output_dir is not None:
            os.makedirs(output_dir, exist_ok=True)
            copies = [open(os.path.join(output_dir, name), "wb") for name in ("stdout", "stderr")]
        self.popen = subprocess.Popen(
            argv, env=environ, stdin=subprocess.PIPE if remote else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **_OWN_PROCESS_GROUP)
        # Before any of its output is forwarded: whoever sees the rank running
        # can rely on it being watched.
        on_start(self.popen.pid)
        if remote and first_input:
            try:
                self.popen.stdin.write(first_input)
                self.popen.stdin.flush()
            except OSError:
                pass   # ssh ended at once; its exit status says why
        self.forwarders = [
            _OutputForwarder(self.rank, self.popen.stdout, sys.stdout, copies[0], timestamps),
            _OutputForwarder(self.rank, self.popen.stderr, sys.stderr, copies[1], timestamps,
                             self.stderr_tail)]
        threading.Thread(target=self._wait, args=(exits,), daemon=True,
                         name=f"horarun-wait-{self.rank}").start()

    def _wait(self, exits):
        code = self.popen.wait()
        self.exited_at = time.monotonic()
        exits.put((self, code))

    def outcome(self):
        """The rank's failures.RankOutcome, once it has exited."""
        return failures.RankOutcome(self.rank, self.popen.returncode, self.exited_at,
                                    self.signalled_at, self.stderr_tail, self.host)

    def send_signal(self, signum):
        """Sends `signum` to the rank's process group (for a remote rank, to
        ssh, and closing its stdin stops the remote command)."""
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        if self.remote and self.popen.stdin and signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        try:
            os.killpg(self.popen.pid, signum)
            if signum in (signal.SIGTERM, signal.SIGINT):
                # A rank stopped by the terminal (it read or wrote it from
                # the background, _OWN_PROCESS_GROUP) handles the signal only
                # once continued.
                os.killpg(self.popen.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    def join_output(self, timeout):
        for forwarder in self.forwarders:
            forwarder.thread.join(timeout)


class Watchdog:
    """A helper process (watchdog.py) that stops the ranks if horarun itself
    is killed; release() tells it that horarun ended normally."""

    def __init__(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "watchdog.py")
        self._process = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, text=True)

    def watch(self, process_group):
        self._send(f"{process_group}\n")

    def release(self):
        self._send("done\n")
        try:
            self._process.stdin.close()
            self._process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _send(self, line):
        try:
            self._process.stdin.write(line)
            self._process.stdin.flush()
        except OSError:
            pass   # the watchdog is gone; the job runs on without it


def rank_output_dir(output_filename, rank, size):
    """Horovod's layout: <dir>/rank.<rank, zero-padded to the width of size - 1>."""
    return os.path.join(output_filename, f"rank.{str(rank).zfill(len(str(size - 1)))}")


def remote_command(host, script, args):
    """The command line that runs `script` on `host`: the launch agent's
    (``--launch-agent AGENT``: AGENT's words, then HOST, then the script, as
    ssh takes them) or ssh's, where '--' ends ssh's options, so that no host
    name can be read as one."""
    agent = getattr(args, "launch_agent", None)
    if agent:
        return shlex.split(agent) + [host, script]
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(args.start_timeout))}"]
    if args.ssh_port is not None:
        argv += ["-o", f"Port={args.ssh_port}"]
    if args.ssh_identity_file:
        argv += ["-o", f"IdentityFile={args.ssh_identity_file}"]
    return argv + ["--", host, script]
