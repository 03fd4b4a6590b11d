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
import sys
import threading
import time

import cloudpickle

from hora.runner import cluster, failures, run_function, signed
from hora.runner.rendezvous import RendezvousClient, RendezvousServer
from hora.spark._engine import (  # noqa: F401
    DEFAULT_START_TIMEOUT,
    DRIVER_ADDR_VARIABLE,
    START_TIMEOUT_VARIABLES,
    _checked_num_proc,
    _Engine,
    _start_timeout,
)
from hora.spark._task import TaskSpec
from hora.spark.elastic import run_elastic  # noqa: F401
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
