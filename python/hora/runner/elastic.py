"""horarun's elastic driver (``--min-np``/``--max-np``/``--host-discovery-script``).

The driver runs *workers*, each a process on a slot of a host the discovery
script lists, named ``host:slot`` for its whole life. It numbers rendezvous
*rounds*: round r lists the workers that take part, survivors first in
their old rank order, then new workers, and gives each its rank, size,
local and cross rank (the store keys of hora.common.elastic). A worker
joins the newest round that includes it at ``hvd.init()``.

- A worker that fails (non-zero exit, signal) is dropped, its host is
  blacklisted (for a random time in ``--blacklist-cooldown-range``, or for
  good), and a new round starts over the survivors. The survivors' sets
  that held it fail at once (fault domains); the others learn of the
  round at their next commit.
- Every ``HORA_ELASTIC_DISCOVERY_INTERVAL`` seconds (1) the script is run;
  free slots on listed, non-blacklisted hosts get new workers (up to
  ``--max-np``) and a new round.
- The first worker that exits 0 ends the rounds: the others finish too,
  and the job's status is theirs.
- Fewer than ``--min-np`` workers for longer than ``--elastic-timeout``, or
  more than ``--reset-limit`` new rounds, stops the job with a message
  saying which.

Where hosts come from and how a worker is started is a *pool*'s business:
horarun's ProcessPool runs the discovery script and starts processes
(locally or over ssh); hora.ray's pool finds Ray's nodes and starts actors.
"""

import json
import os
import queue
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from hora.runner import env as rank_env
from hora.runner import failures
from hora.runner import hosts as host_list
from hora.runner import processes
from hora.runner import rounds
from hora.runner.rendezvous import RendezvousServer

DISCOVERY_INTERVAL_VARIABLE = "HORA_ELASTIC_DISCOVERY_INTERVAL"
WORKER_TIMEOUT_MARGIN = 5.0   # seconds


class ElasticError(RuntimeError):
    """The elastic job cannot go on; the message says why."""


# The driver's options under the names of the Python APIs that run it
# (hora.spark.run_elastic, hora.ray's elastic executors).
API_NAMES = {"--min-np": "min_num_proc", "--max-np": "max_num_proc", "--elastic-timeout": "elastic_timeout",
             "--reset-limit": "reset_limit", "--blacklist-cooldown-range": "cooldown_range"}


def checked_api_arguments(caller, min_num_proc, max_num_proc, elastic_timeout, reset_limit, cooldown_range):
    """The elastic arguments of a Python API, checked; ValueError naming
    `caller` and the argument otherwise. Returns cooldown_range as a tuple
    of floats (or None)."""
    for name, value in (("min_num_proc", min_num_proc), ("max_num_proc", max_num_proc)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{caller}: {name} must be a positive integer, got {value!r}")
    if max_num_proc is not None and min_num_proc is not None and max_num_proc < min_num_proc:
        raise ValueError(f"{caller}: max_num_proc {max_num_proc} is below min_num_proc {min_num_proc}")
    if isinstance(elastic_timeout, bool) or not isinstance(elastic_timeout, (int, float)) or elastic_timeout <= 0:
        raise ValueError(f"{caller}: elastic_timeout must be a positive number of seconds, got {elastic_timeout!r}")
    if reset_limit is not None and (isinstance(reset_limit, bool) or not isinstance(reset_limit, int)
                                    or reset_limit < 0):
        raise ValueError(f"{caller}: reset_limit must be a non-negative integer, got {reset_limit!r}")
    if cooldown_range is None:
        return None
    try:
        low, high = (float(v) for v in cooldown_range)
    except (TypeError, ValueError):
        low = high = -1.0
    if not 0 < low <= high:
        raise ValueError(f"{caller}: cooldown_range must be (low, high) with 0 < low <= high, got {cooldown_range!r}")
    return low, high


def parse_discovery_output(text, slots_per_host, script):
    """{host: slots} from the script's lines "host" or "host:slots"; each
    host name is checked as -H checks its own."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        host, _, slots = line.partition(":")
        try:
            host_list.check_host_name(host, f"host discovery script {script}, line {number}")
        except host_list.HostSpecError as error:
            raise ElasticError(f"{error} (line {line!r})") from None
        if slots:
            try:
                count = int(slots)
            except ValueError:
                raise ElasticError(f"host discovery script {script}, line {number}: {line!r} is not "
                                   "host or host:slots") from None
        elif slots_per_host is None:
            raise ElasticError(f"host discovery script {script}, line {number}: {line!r} gives no slots; "
                               "print host:slots or pass --slots-per-host")
        else:
            count = slots_per_host
        if count < 1:
            raise ElasticError(f"host discovery script {script}, line {number}: {line!r} has no slots")
        found[host] = count
    return found


def discover(script, slots_per_host, timeout=30):
    try:
        out = subprocess.run(script, shell=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ElasticError(f"host discovery script {script} did not finish within {timeout} s") from None
    if out.returncode != 0:
        raise ElasticError(f"host discovery script {script} exited with code {out.returncode}: "
                           f"{out.stderr.strip()[-500:]}")
    return parse_discovery_output(out.stdout, slots_per_host, script)


def plan_round(survivors, newcomers, host_of):
    """{worker: [rank, size, local rank, local size, cross rank, cross size]}:
    survivors keep their order, newcomers follow; local ranks count a host's
    workers in rank order, cross ranks the hosts that have that local rank."""
    order = list(survivors) + list(newcomers)
    size = len(order)
    local = {}
    by_host = {}
    for worker in order:
        members = by_host.setdefault(host_of[worker], [])
        local[worker] = len(members)
        members.append(worker)
    assignment = {}
    for rank, worker in enumerate(order):
        same_local = [h for h in by_host if len(by_host[h]) > local[worker]]
        assignment[worker] = [rank, size, local[worker], len(by_host[host_of[worker]]),
                              same_local.index(host_of[worker]), len(same_local)]
    return assignment


@dataclass
class _Worker:
    worker_id: str
    host: str
    number: int            # the order it was started in: its output's prefix
    process: object        # the pool's handle (see ProcessPool.start)


class ProcessPool:
    """horarun's workers: hosts from --host-discovery-script, each worker a
    process on its host (ssh for a remote one).

    A pool's interface: discover() -> {host: slots}; rendezvous_address(host)
    and hostname(host), what a worker on `host` gets as HORA_RENDEZVOUS_ADDR
    and HORA_HOSTNAME; start(worker_id, host, number, variables) -> a handle
    with signal(signum) and finish(timeout), which puts (handle, exit
    status) on the job's `exits` queue when the worker ends; starting(),
    True while the pool still gathers the first round's workers (the
    --elastic-timeout clock does not run then); close()."""

    def __init__(self, job):
        self.job = job

    def discover(self):
        return discover(self.job.args.host_discovery_script, self.job.args.slots_per_host)

    def rendezvous_address(self, host):
        if host_list.is_local(host):
            return "127.0.0.1"
        return self.job.args.rendezvous_addr or host_list.outward_address(host)

    def hostname(self, host):
        return "127.0.0.1" if host_list.is_local(host) else host

    def starting(self):
        return False

    def start(self, worker_id, host, number, variables):
        args = self.job.args
        placement = host_list.RankPlacement(number, 0, host, 0, 1, 0, 1)
        first_input = b""
        if host_list.is_local(host):
            argv, environ, remote = args.command, rank_env.local_environment(variables), False
        else:
            remote_variables = rank_env.remote_environment(variables)
            script = rank_env.remote_script(os.getcwd(), remote_variables, args.command)
            argv, environ, remote = processes.remote_command(host, script, args), None, True
            first_input = rank_env.secret_input(remote_variables)
        handle = _ProcessHandle()
        handle.process = processes.RankProcess(placement, argv, environ, _Relabel(self.job.exits, handle), remote,
                                               lambda pid: None, first_input=first_input)
        return handle

    def close(self):
        pass


class _Relabel:
    """Puts a RankProcess's (process, status) on the job's queue as (its
    handle, status)."""

    def __init__(self, exits, handle):
        self.exits = exits
        self.handle = handle

    def put(self, item):
        self.exits.put((self.handle, item[1]))


class _ProcessHandle:
    process = None   # its processes.RankProcess

    def signal(self, signum):
        if self.process.popen.returncode is None:
            self.process.send_signal(signum)

    def finish(self, timeout):
        try:
            self.process.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
        self.process.join_output(timeout=2.0)


class ElasticJob:
    """The rounds of one elastic job. `args` holds horarun's elastic options
    (min_np, max_np, elastic_timeout, reset_limit,
    blacklist_cooldown_range, start_timeout, verbose, and what the pool
    reads); `pool` makes the workers (ProcessPool by default); `name`
    starts the driver's lines."""

    def __init__(self, args, extra_env=None, pool=None, name="horarun"):
        self.args = args
        self.name = name
        self.secret = secrets.token_hex(16)
        self.pool = pool(self) if pool is not None else ProcessPool(self)
        self.error = None
        self.extra_env = {**rank_env.job_environment(args), **(extra_env or {})}
        self.interval = float(os.environ.get(DISCOVERY_INTERVAL_VARIABLE, "1"))
        self.exits = queue.Queue()
        self.workers = {}            # worker id -> _Worker, alive ones
        self.order = []              # worker ids of the newest round, in rank order
        self.pending = []            # started, not yet in a round
        self.blacklist = {}          # host -> monotonic time it may come back (inf: never)
        self.round = -1
        self.resets = 0
        self.finishing = False
        self.finishers = set()
        self.last_failure = None
        self.status = 0
        self.started = 0
        self.received_signal = None
        self.server = None

    # --- the job --------------------------------------------------------

    def run(self):
        # Hosts are known only as discovery finds them: listen everywhere
        # (every request needs the job's secret).
        self.server = RendezvousServer("0.0.0.0", 0, self.secret).start()
        try:
            return self._run()
        except ElasticError as error:
            self.error = str(error)
            self._say(f"elastic job stopped: {error}")
            return 1
        finally:
            self._stop_all(signal.SIGKILL)
            self.pool.close()
            self.server.stop()

    def stop_reason(self, status, names=API_NAMES):
        """Why the job ended with `status` (not 0), naming the options by
        `names` ({flag: name})."""
        if self.error:
            reason = self.error
            for flag, name in names.items():
                reason = reason.replace(flag, name)
            return reason
        if self.last_failure:
            return f"a worker of the last round failed ({self.last_failure})"
        return f"exit status {status}"

    def _run(self):
        short_since = None
        next_discovery = 0.0
        while True:
            if self.received_signal is not None:
                self._stop_all(self.received_signal)
                return 128 + self.received_signal
            now = time.monotonic()
            changed = self._collect_exits()
            if self.finishing:
                if not self.workers:
                    return self.status
                time.sleep(0.05)
                continue
            if now >= next_discovery:
                next_discovery = now + self.interval
                hosts = self.pool.discover()
                changed |= self._grow(hosts)
                if not self.workers and hosts and all(self.blacklist.get(h) == float("inf") for h in hosts):
                    raise ElasticError(f"no worker is left and every listed host is blacklisted for good "
                                       f"(the last failure: {self.last_failure}); --blacklist-cooldown-range "
                                       "lets hosts come back")
            alive = len(self.workers)
            if alive < self.args.min_np and self.pool.starting():
                short_since = None   # the pool's own start-up limit applies
                time.sleep(0.05)
                continue
            if alive < self.args.min_np:
                short_since = short_since or now
                if now - short_since > self.args.elastic_timeout:
                    raise ElasticError(f"fewer than --min-np {self.args.min_np} workers ({alive}) for longer "
                                       f"than --elastic-timeout {self.args.elastic_timeout:g} s")
                time.sleep(0.05)
                continue
            short_since = None
            if changed or self.round < 0:
                self._next_round()
            time.sleep(0.05)

    def _next_round(self):
        if self.round >= 0:
            self.resets += 1
            if self.args.reset_limit is not None and self.resets > self.args.reset_limit:
                raise ElasticError(f"the workers changed {self.resets} times, more than --reset-limit "
                                   f"{self.args.reset_limit}")
        survivors = [w for w in self.order if w in self.workers]
        newcomers = [w for w in self.pending if w in self.workers]
        assignment = plan_round(survivors, newcomers, {w: self.workers[w].host for w in survivors + newcomers})
        self.round += 1
        self.order, self.pending = survivors + newcomers, []
        self.server.set_value(rounds.assignment_key(self.round), json.dumps(assignment))
        self.server.set_value(rounds.ROUND_KEY, str(self.round))
        if self.args.verbose or self.round > 0:
            listing = ", ".join(f"{w} rank {assignment[w][0]}" for w in self.order)
            self._say(f"elastic round {self.round}: {len(self.order)} workers ({listing})")

    def _collect_exits(self):
        changed = False
        while True:
            try:
                process, code = self.exits.get_nowait()
            except queue.Empty:
                return changed
            worker = next((w for w in self.workers.values() if w.process is process), None)
            if worker is None:
                continue
            del self.workers[worker.worker_id]
            if code == 0:
                if not self.finishing:
                    # Training is over: the others of the round it ended in
                    # finish too; workers of no round, or of a later one
                    # it never joined, are not needed.
                    self.finishing = True
                    final = self._joined(worker.worker_id)
                    self.finishers = {w for w in self.workers if self._joined(w) == final}
                    for other in list(self.workers.values()):
                        if other.worker_id not in self.finishers:
                            other.process.signal(signal.SIGTERM)
                continue
            if self.finishing:
                if worker.worker_id in self.finishers:
                    self.status = self.status or code
                continue
            what = getattr(worker.process, "failure", None) or failures.describe_exit(code)
            self.last_failure = f"worker {worker.worker_id} {what}"
            self._say(f"{self.last_failure}; blacklisting host {worker.host}")
            self._blacklist(worker.host)
            changed = True

    def _joined(self, worker_id):
        key = rounds.joined_key(worker_id).encode()
        value = self.server.values_of_keys_starting_with(key).get(key)
        return None if value is None else int(value)

    def _blacklist(self, host):
        cooldown = self.args.blacklist_cooldown_range
        until = float("inf") if not cooldown else time.monotonic() + random.uniform(*cooldown)
        self.blacklist[host] = until

    def _grow(self, hosts):
        """Starts workers on free slots of usable hosts, up to --max-np;
        True when some were started."""
        now = time.monotonic()
        for host, until in list(self.blacklist.items()):
            if until <= now:
                del self.blacklist[host]
        used = {}
        for worker in self.workers.values():
            used.setdefault(worker.host, set()).add(int(worker.worker_id.rsplit(":", 1)[1]))
        started = False
        for host, slots in hosts.items():
            if host in self.blacklist:
                continue
            for slot in range(slots):
                if len(self.workers) >= self.args.max_np:
                    return started
                if slot in used.get(host, ()):
                    continue
                self._start(host, slot)
                started = True
        return started

    def _start(self, host, slot):
        worker_id = f"{host}:{slot}"
        variables = {
            "HORA_RENDEZVOUS_ADDR": self.pool.rendezvous_address(host),
            "HORA_RENDEZVOUS_PORT": str(self.server.port),
            "HORA_SECRET": self.secret,
            # A new worker waits in init for the others to reach their next
            # commit: as long as a round may take to form.
            "HORA_START_TIMEOUT": str(max(self.args.start_timeout, self.args.elastic_timeout)),
            "HORA_HOSTNAME": self.pool.hostname(host),
            rounds.ENVIRONMENT_FLAG: "1",
            rounds.WORKER_VARIABLE: worker_id,
            # Workers wait for a round a little longer than the driver waits
            # for workers: when no round can form, the driver stops the job
            # and says why, rather than each worker timing out on its own.
            rounds.TIMEOUT_VARIABLE: str(self.args.elastic_timeout + WORKER_TIMEOUT_MARGIN),
        }
        if "OMP_NUM_THREADS" not in os.environ:
            variables["OMP_NUM_THREADS"] = "1"
        variables.update(self.extra_env)
        handle = self.pool.start(worker_id, host, self.started, variables)
        self.workers[worker_id] = _Worker(worker_id, host, self.started, handle)
        self.pending.append(worker_id)
        self.started += 1

    def _stop_all(self, signum):
        for worker in list(self.workers.values()):
            worker.process.signal(signum)
        for worker in list(self.workers.values()):
            worker.process.finish(timeout=5)

    def forward_signal(self, signum, _frame=None):
        self.received_signal = signum

    def _say(self, text):
        print(f"{self.name}: {text}", file=sys.stderr, flush=True)


def main(args):
    job = ElasticJob(args)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, job.forward_signal)
    return job.run()
