"""What hora.spark.run and run_elastic share: the Spark entry point in use
(a SparkContext or a Spark Connect session), how many tasks it runs at
once, and the checks of num_proc and start_timeout."""

import os
import socket
import sys

from hora.spark._task import arrow_partition, barrier_partition

DEFAULT_START_TIMEOUT = 600
# The address the tasks reach this process at, when not the one Spark knows.
DRIVER_ADDR_VARIABLE = "HORA_SPARK_DRIVER_ADDR"
START_TIMEOUT_VARIABLES = ("HORA_SPARK_START_TIMEOUT", "HOROVOD_SPARK_START_TIMEOUT")


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
        self._tasks_use_this_python_when_local()
        context.setJobGroup(tag, "hora.spark.run", interruptOnCancel=True)
        try:
            context.parallelize(range(spec.num_proc), spec.num_proc).barrier().mapPartitions(
                barrier_partition(spec)).collect()
        except Exception as error:   # noqa: BLE001 - Py4J wraps the tasks' errors
            if "No module named 'hora'" not in str(error):
                raise
            raise RuntimeError(
                f"hora.spark.run: Spark's tasks run {context.pythonExec!r}, which cannot import hora; "
                "set PYSPARK_PYTHON (or spark.pyspark.python) to a Python that has hora installed "
                f"(this driver runs {sys.executable}) before the SparkSession is created") from None

    def _tasks_use_this_python_when_local(self):
        """In local mode with no Python chosen for the tasks
        (PYSPARK_PYTHON, spark.pyspark.python), Spark would run `python3`
        from PATH, which need not have hora (a virtual environment's python
        run without activating it): the tasks run this driver's interpreter
        instead, which does. On a cluster the driver's path may not exist
        on the executors, so nothing is changed there."""
        context = self._handle
        if not str(context.master).startswith("local"):
            return
        if os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python"):
            return
        context.pythonExec = sys.executable

    def cancel(self, tag):
        if self.kind == "Spark Connect":
            self._handle.interruptTag(tag)
        else:
            self._handle.cancelJobGroup(tag)
