"""hora.spark.run_elastic: elastic training on Spark tasks (Horovod's
``horovod.spark.run_elastic``).

The job is one ordinary (not barrier) Spark stage of max_num_proc tasks,
each holding a slot for the driver: it offers itself, runs a worker when
the driver answers, and offers itself again when that worker ends (see
_task.elastic_partition). The driver is horarun's elastic driver
(hora.runner.elastic) with the offers as its hosts' free slots: a worker
that fails blacklists its host (for a random time in cooldown_range, else
for good) and the survivors go on in a new round from their last commit;
tasks that Spark starts later (slots freed, executors added, a task
retried after its executor was lost) join at the next round, up to
max_num_proc. The first worker whose function returns ends the rounds;
run_elastic returns the results of that round's workers in rank order.
"""

import json
import os
import sys
import threading
import time
import types

import cloudpickle

from hora.runner import cluster, run_function, signed
from hora.runner import elastic as driver
from hora.runner.rendezvous import RendezvousClient, RendezvousServer
from hora.spark import _task
from hora.spark._engine import _checked_num_proc, _Engine, _start_timeout

# After the rounds end, how long the Spark job may take to finish its tasks.
FINISH_SECONDS = 30.0


def run_elastic(fn, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None, cooldown_range=None, executable=None,
                spark=None):
    """Runs ``fn(*args, **kwargs)`` as an elastic job on Spark tasks (``fn``
    uses ``hvd.elastic.run`` and a State, as under horarun's elastic mode)
    and returns the results of the workers that finished, in rank order.

    num_proc: the workers of the first round (default: the cluster's task
    slots), which waits for that many tasks up to start_timeout;
    min_num_proc (min_np) and max_num_proc (max_np, the tasks the job
    runs) default to it.
    elastic_timeout: how long the job may have fewer than min_num_proc
    workers (default HOROVOD_ELASTIC_TIMEOUT, else 600 s). cooldown_range:
    (low, high) seconds a failed worker's host waits before it gets
    workers again (default: never). The other arguments mean what they
    mean to hora.spark.run. RuntimeError says why when the job stops.
    """
    engine = _Engine.active(spark)
    if engine.kind == "Spark Connect":
        raise NotImplementedError("hora.spark.run_elastic needs a SparkContext (its tasks are not a barrier "
                                  "stage, which Spark Connect's DataFrame API cannot run as one long task each)")
    slots = engine.slots()
    num_proc = _checked_num_proc(num_proc, slots) if num_proc is not None else slots
    min_num_proc = min_np if min_np is not None else (min_num_proc if min_num_proc is not None else num_proc)
    max_num_proc = max_np if max_np is not None else (max_num_proc if max_num_proc is not None else num_proc)
    if elastic_timeout is None:
        elastic_timeout = float(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600"))
    cooldown_range = driver.checked_api_arguments("hora.spark.run_elastic", min_num_proc, max_num_proc,
                                                  elastic_timeout, reset_limit, cooldown_range)
    if not min_num_proc <= num_proc <= max_num_proc:
        raise ValueError(f"hora.spark.run_elastic: need min_num_proc <= num_proc <= max_num_proc, got "
                         f"{min_num_proc}, {num_proc}, {max_num_proc}")
    options = types.SimpleNamespace(
        min_np=min_num_proc, max_np=max_num_proc, elastic_timeout=elastic_timeout, reset_limit=reset_limit,
        blacklist_cooldown_range=cooldown_range,
        start_timeout=_start_timeout(start_timeout), verbose=verbose >= 2, timeline_filename=None,
        timeline_mark_cycles=False, monitor=None, network_interfaces=",".join(nics) if nics else None)
    payload = cloudpickle.dumps(lambda: fn(*args, **(kwargs or {})))
    pools = []

    def make_pool(job):
        pools.append(_TaskPool(job, engine, num_proc, max_num_proc, dict(env or {}), executable, stdout, stderr,
                               prefix_output_with_timestamp))
        return pools[0]

    job = driver.ElasticJob(options, pool=make_pool, name="hora.spark")
    pool = pools[0]
    pool.prepare(payload)
    status = job.run()
    if status != 0:
        raise RuntimeError(f"hora.spark.run_elastic: the elastic job stopped: {job.stop_reason(status)}")
    return pool.results([worker for worker in job.order])


class _TaskPool:
    """The driver's view of the tasks' offers: hosts with free slots, and
    workers started by answering an offer."""

    def __init__(self, job, engine, initial, tasks, env, executable, stdout, stderr, timestamps):
        self.job = job
        self.engine = engine
        self.initial = initial
        self.tasks = tasks
        self.first_round_by = None
        self.env = env
        self.executable = executable
        self.address = engine.driver_address()
        self.answered = set()
        self.handles = {}           # worker number -> handle
        self._results = {}
        self.spark_error = None
        self.relay = cluster.OutputRelay(job.secret, stdout or sys.stdout, stderr or sys.stderr, host="0.0.0.0",
                                         timestamps=timestamps, on_end=self._ended)
        self.tag = f"hora.spark.run_elastic.{os.getpid()}.{time.monotonic_ns()}"
        self.thread = None

    # --- the Spark job --------------------------------------------------------

    def prepare(self, payload):
        """The function; the tasks start at the first discover(), when the
        job's server is up (ElasticJob.run starts it)."""
        self.payload = payload

    def _launch(self):
        with RendezvousClient("127.0.0.1", self.job.server.port, self.job.secret) as store:
            store.set(run_function.FUNCTION_KEY, signed.sign(self.job.secret, run_function.FUNCTION_KEY,
                                                             self.payload))
        spec = _task.TaskSpec(self.tasks, self.address, self.job.server.port, self.job.secret, self.relay.port,
                              int(self.job.args.start_timeout), tuple(self.env.items()), self.executable)

        def run_job():
            try:
                context = self.engine._handle
                context.setJobGroup(self.tag, "hora.spark.run_elastic", interruptOnCancel=True)
                context.parallelize(range(self.tasks), self.tasks).mapPartitions(
                    _task.elastic_partition(spec)).collect()
            except BaseException as error:   # noqa: BLE001 - reported by discover()
                self.spark_error = error

        self.thread = threading.Thread(target=run_job, daemon=True, name=self.tag)
        self.thread.start()

    def close(self):
        """When the rounds end, before the job's server stops: answers every
        offer with 'stop' until the Spark job ends, and keeps the results."""
        self._results = self.job.server.values_of_keys_starting_with("result/")
        deadline = time.monotonic() + FINISH_SECONDS
        while self.thread is not None and self.thread.is_alive() and time.monotonic() < deadline:
            self._answer_stops()
            self.thread.join(0.1)
        if self.thread is not None and self.thread.is_alive():
            self.engine.cancel(self.tag)
        self.relay.close()

    def results(self, order):
        """The results of the workers in `order` that stored one; RuntimeError
        naming the first whose result is not signed with the job's secret."""
        results = []
        for worker in order:
            key = run_function.result_key(worker)
            if key.encode() not in self._results:
                continue
            try:
                payload = signed.verify(self.job.secret, key, self._results[key.encode()])
            except signed.UnsignedValueError as error:
                raise RuntimeError(f"worker {worker} of hora.spark.run_elastic: its result {error}") from None
            results.append(cloudpickle.loads(payload))
        return results

    # --- the elastic driver's pool interface ---------------------------------------

    def discover(self):
        if self.thread is None:
            self._launch()
            self.first_round_by = time.monotonic() + self.job.args.start_timeout
        if self.spark_error is not None and not self.handles:
            raise driver.ElasticError(f"the Spark job failed: {str(self.spark_error).strip().splitlines()[0]}")
        hosts = {}
        for worker in self.job.workers.values():
            hosts[worker.host] = hosts.get(worker.host, 0) + 1
        for offer, host in self._offers().items():
            hosts[host] = hosts.get(host, 0) + 1
        # The first round waits for num_proc tasks (as long as start_timeout
        # allows), not for the first that happen to start.
        if self.job.round < 0 and sum(hosts.values()) < self.initial and time.monotonic() < self.first_round_by:
            return {}
        return hosts

    def rendezvous_address(self, host):
        return self.address

    def starting(self):
        return self.job.round < 0 and (self.first_round_by is None or time.monotonic() < self.first_round_by)

    def hostname(self, host):
        return host

    def start(self, worker_id, host, number, variables):
        offer = next(o for o, h in self._offers().items() if h == host)
        self.answered.add(offer)
        handle = _TaskHandle(self, number)
        self.handles[number] = handle
        self.job.server.set_value(_task.answer_key(offer), json.dumps([number, variables]))
        return handle

    # --- helpers ----------------------------------------------------------------

    def _offers(self):
        """{offer: host} of the offers not answered yet."""
        prefix = _task.offer_key("")
        offers = {}
        for key, value in self.job.server.values_of_keys_starting_with(prefix).items():
            offer = key.decode()[len(prefix):]
            if offer not in self.answered:
                offers[offer] = value.decode()
        return offers

    def _answer_stops(self):
        for offer in self._offers():
            self.answered.add(offer)
            self.job.server.set_value(_task.answer_key(offer), _task.STOP)

    def _ended(self, number, status):
        handle = self.handles.get(number)
        if handle is None:
            return
        handle.done.set()
        self.job.exits.put((handle, status if status is not None else -9))


class _TaskHandle:
    def __init__(self, pool, number):
        self.pool = pool
        self.number = number
        self.done = threading.Event()
        self.failure = None

    def signal(self, signum):
        if not self.done.is_set():
            self.pool.job.server.set_value(_task.signal_key(self.number), str(int(signum)))

    def finish(self, timeout):
        if not self.done.wait(timeout):
            self.signal(9)
            self.done.wait(2.0)
