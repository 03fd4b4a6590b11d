"""hora on Spark: ``hora.spark.run(fn, num_proc=4)`` runs ``fn`` as the
ranks of one hora job on Spark tasks and returns what each rank returned,
in rank order (Horovod's ``horovod.spark.run``).

The tasks run in one barrier stage, so Spark starts all of them together
or none. The driver serves the job's rendezvous (with a secret made for
this job) and the relay that prints the ranks' output; each task starts its
rank as a child process (see _task.py) that dies with the task. Inside
``fn``, ``hvd.init()`` works as under horarun, process sets included.
See docs/spark.md.
"""

import itertools
import os
import secrets
import socket
import sys
import threading
import time

import cloudpickle

from hora.runner import cluster, failures, run_function, signed
from hora.runner.rendezvous import RendezvousClient, RendezvousServer
from hora.spark._task import TaskSpec, arrow_partition, barrier_partition

DEFAULT_START_TIMEOUT = 600
# The address the tasks reach this process at, when not the one Spark knows.
DRIVER_ADDR_VARIABLE = "HORA_SPARK_DRIVER_ADDR"
START_TIMEOUT_VARIABLES = ("HORA_SPARK_START_TIMEOUT", "HOROVOD_SPARK_START_TIMEOUT")
# After a failure, how long the driver waits for the other tasks to report
# how they ended (their ranks fail within the op timeout, or Spark stops them).
FAILURE_REPORT_SECONDS = 10.0
_POLL_SECONDS = 0.05
_job_ids = itertools.count()


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None, spark=None):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` Spark tasks, each a rank
    of one hora job, and returns the ranks' results in rank order.

    num_proc: the number of ranks, by default every task slot of the
        cluster; more than the cluster's slots is a ValueError at once.
    start_timeout: seconds for every task to start (default
        HORA_SPARK_START_TIMEOUT or HOROVOD_SPARK_START_TIMEOUT, else 600);
        then the job is cancelled with a TimeoutError.
    env: variables added to each rank's environment.
    stdout, stderr: text streams the ranks' lines are written to, each
        line after '[rank]:' (default sys.stdout and sys.stderr).
    verbose: 2 prints the job's start and end on stderr.
    nics: network interfaces for the ranks' connections
        (HORA_NETWORK_INTERFACES).
    executable: the Python that runs each rank (default: the Spark
        worker's).
    spark: the SparkSession (classic or Spark Connect) or SparkContext to
        run on; by default the active session, else the active context.

    A rank that fails fails the job: RuntimeError naming the rank that
    failed first, with the end of its stderr. ``use_mpi`` is not supported
    (Spark cannot start MPI's daemons); ``use_gloo`` and
    ``extra_mpi_args`` have no effect.
    """
    if use_mpi:
        raise NotImplementedError("hora.spark.run runs its ranks over Gloo and shared memory; use_mpi=True "
                                  "is not supported (Spark tasks cannot start MPI's daemons)")
    engine = _Engine.active(spark)
    num_proc = _checked_num_proc(num_proc, engine.slots())
    start_timeout = _start_timeout(start_timeout)
    variables = dict(env or {})
    if nics:
        variables.setdefault("HORA_NETWORK_INTERFACES", ",".join(nics))
    payload = cloudpickle.dumps(lambda: fn(*args, **(kwargs or {})))
    secret = secrets.token_hex(16)
    address = engine.driver_address()
    server = RendezvousServer("0.0.0.0", 0, secret).start()
    relay = cluster.OutputRelay(secret, stdout or sys.stdout, stderr or sys.stderr, host="0.0.0.0",
                                timestamps=prefix_output_with_timestamp)
    try:
        with RendezvousClient("127.0.0.1", server.port, secret) as store:
            store.set(run_function.FUNCTION_KEY, signed.sign(secret, run_function.FUNCTION_KEY, payload))
            spec = TaskSpec(num_proc, address, server.port, secret, relay.port, int(start_timeout),
                            tuple((str(k), str(v)) for k, v in variables.items()), executable)
            started = time.monotonic()
            if verbose >= 2:
                print(f"hora.spark.run: {num_proc} ranks on {engine.kind}, rendezvous at {address}:"
                      f"{server.port}", file=sys.stderr, flush=True)
            _run_job(engine, spec, relay, start_timeout)
            results = run_function._collect(store, secret, list(range(num_proc)), 0)
            if verbose >= 2:
                print(f"hora.spark.run: done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
            return results
    finally:
        relay.close()
        server.stop()


def _checked_num_proc(num_proc, slots):
    if num_proc is None:
        if slots is None:
            raise ValueError("hora.spark.run: give num_proc (the number of task slots is not known under "
                             "Spark Connect)")
        return slots
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"hora.spark.run: num_proc must be a positive integer, got {num_proc!r}")
    if slots is not None and num_proc > slots:
        raise ValueError(f"hora.spark.run: num_proc={num_proc} needs {num_proc} task slots at once (a barrier "
                         f"stage), but the cluster has {slots}; lower num_proc or add executors or cores")
    return num_proc


def _start_timeout(start_timeout):
    if start_timeout is None:
        for name in START_TIMEOUT_VARIABLES:
            if os.environ.get(name):
                start_timeout = os.environ[name]
                break
        else:
            return DEFAULT_START_TIMEOUT
    try:
        value = float(start_timeout)
    except (TypeError, ValueError):
        value = -1
    if value <= 0:
        raise ValueError(f"hora.spark.run: start_timeout must be a positive number of seconds, "
                         f"got {start_timeout!r}")
    return value


def _run_job(engine, spec, relay, start_timeout):
    """Runs the barrier stage; returns when every rank succeeded, raises
    naming the first rank that failed otherwise."""
    tag = f"hora.spark.run.{os.getpid()}.{next(_job_ids)}"
    outcome = {}

    def job():
        try:
            engine.run(spec, tag)
        except BaseException as error:   # reported by the driver's thread
            outcome["error"] = error

    thread = threading.Thread(target=job, daemon=True, name=tag)
    thread.start()
    deadline = time.monotonic() + start_timeout
    try:
        while thread.is_alive():
            thread.join(_POLL_SECONDS)
            if deadline is not None and len(relay.connected()) == spec.num_proc:
                deadline = None
            if deadline is not None and time.monotonic() > deadline:
                engine.cancel(tag)
                thread.join(FAILURE_REPORT_SECONDS)
                raise TimeoutError(
                    f"hora.spark.run: {len(relay.connected())} of {spec.num_proc} tasks started within "
                    f"start_timeout={start_timeout:g} s; the cluster may lack free task slots (a barrier "
                    f"stage needs all {spec.num_proc} at once), or raise start_timeout")
    except KeyboardInterrupt:
        engine.cancel(tag)
        raise
    error = outcome.get("error")
    ranks_failed = any(o.code != 0 for o in relay.outcomes())
    if error is None and not ranks_failed:
        return
    relay.wait_quiet(FAILURE_REPORT_SECONDS)
    raise RuntimeError(_failure_text(relay.outcomes(), error)) from None


def _failure_text(outcomes, error):
    summary = failures.Summary(outcomes)
    if summary.failures:
        return "hora.spark.run failed:\n" + "\n".join(summary.lines(keep_going=False))
    # No rank reported a failure: the tasks failed before starting theirs.
    return "hora.spark.run: the Spark job failed before its ranks ran:\n" + _python_error(str(error))


def _python_error(text, lines_shown=20):
    """The last Python traceback in a Spark error (whose text goes on with
    the JVM's stack), else the text without JVM frames."""
    lines = text.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith("Traceback (most recent call last):")]
    if not starts:
        return "\n".join([line for line in lines if not line.lstrip().startswith("at ")][-lines_shown:])
    block = []
    for line in lines[starts[-1]:]:
        if line.lstrip().startswith("at ") and line.startswith(("\t", " ")):
            break
        block.append(line)
    return "\n".join(block[-lines_shown:])


class _Engine:
    """The Spark entry point in use: a SparkContext (classic), or a Spark
    Connect session (DataFrame API only)."""

    def __init__(self, kind, handle):
        self.kind = kind
        self._handle = handle

    @classmethod
    def active(cls, spark=None):
        """The engine of `spark` (a SparkSession, Connect or classic, or a
        SparkContext), else of the active session, else of the active
        SparkContext."""
        from pyspark import SparkContext

        if spark is None:
            try:
                from pyspark.sql import SparkSession
                spark = SparkSession.getActiveSession()
            except Exception:   # noqa: BLE001 - no usable session
                spark = None
        if spark is None:
            spark = SparkContext._active_spark_context
        if spark is None:
            raise RuntimeError("hora.spark.run: no active Spark session; create one first "
                               "(SparkSession.builder...getOrCreate())")
        if isinstance(spark, SparkContext):
            return cls("a SparkContext", spark)
        if type(spark).__module__.startswith("pyspark.sql.connect"):
            return cls("Spark Connect", spark)
        if hasattr(spark, "sparkContext"):
            return cls("a SparkContext", spark.sparkContext)
        raise TypeError(f"hora.spark.run: spark must be a SparkSession or a SparkContext, got "
                        f"{type(spark).__name__}")

    def slots(self):
        """How many tasks the cluster runs at once, or None if not known."""
        if self.kind == "Spark Connect":
            return None
        context = self._handle
        task_cpus = int(context.getConf().get("spark.task.cpus", "1"))
        try:
            scala_context = context._jsc.sc()
            profile = scala_context.resourceProfileManager().defaultResourceProfile()
            return int(scala_context.maxNumConcurrentTasks(profile))
        except Exception:   # noqa: BLE001 - an older or different JVM API
            return max(1, context.defaultParallelism // task_cpus)

    def driver_address(self):
        """The address tasks reach the driver at."""
        chosen = os.environ.get(DRIVER_ADDR_VARIABLE)
        if chosen:
            return chosen
        if self.kind == "Spark Connect":
            # The rendezvous runs here, in the Connect client, not in Spark's driver.
            return socket.gethostbyname(socket.gethostname())
        return self._handle.getConf().get("spark.driver.host", "127.0.0.1")

    def run(self, spec, tag):
        if self.kind == "Spark Connect":
            session = self._handle
            session.addTag(tag)
            try:
                session.range(spec.num_proc, numPartitions=spec.num_proc).mapInArrow(
                    arrow_partition(spec), "rank long", barrier=True).collect()
            finally:
                session.removeTag(tag)
            return
        context = self._handle
        context.setJobGroup(tag, "hora.spark.run", interruptOnCancel=True)
        context.parallelize(range(spec.num_proc), spec.num_proc).barrier().mapPartitions(
            barrier_partition(spec)).collect()

    def cancel(self, tag):
        if self.kind == "Spark Connect":
            self._handle.interruptTag(tag)
        else:
            self._handle.cancelJobGroup(tag)


from hora.spark.elastic import run_elastic  # noqa: E402,F401  (uses this module's helpers)
