"""hora.spark.run on a local[4] Spark session: results in rank order, process
sets inside the function, failures named, slot and argument checks, the
job's secret."""

import io
import os
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

import cluster_tasks
import hora.spark

cloudpickle.register_pickle_by_value(cluster_tasks)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# A rank whose peer died fails within this op timeout (seconds).
OP_TIMEOUT = 20


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[4]").appName("hora-tests")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.sparkContext.setLogLevel("FATAL")
    yield session
    session.stop()


@pytest.mark.parametrize("num_proc", [1, 2, 4])
def test_results_come_back_in_rank_order(spark, num_proc):
    results = hora.spark.run(cluster_tasks.coordinates, num_proc=num_proc)
    assert [r["rank"] for r in results] == list(range(num_proc))
    expected_sum = num_proc * (num_proc + 1) / 2
    for rank, result in enumerate(results):
        # One host: local ranks are the ranks, one cross rank.
        assert (result["size"], result["local_rank"], result["local_size"]) == (num_proc, rank, num_proc)
        assert (result["cross_rank"], result["cross_size"]) == (0, 1)
        assert result["sum"] == expected_sum
    assert len({r["pid"] for r in results}) == num_proc


def test_arguments_reach_the_function(spark):
    results = hora.spark.run(lambda a, b=0: (int(os.environ["HORA_RANK"]), a + b), args=(40,), kwargs={"b": 2},
                             num_proc=2, env={"HORA_TEST_VALUE": "x"})
    assert results == [(0, 42), (1, 42)]
    assert hora.spark.run(lambda: os.environ["HORA_TEST_VALUE"], num_proc=1, env={"HORA_TEST_VALUE": "x"}) == ["x"]


def test_two_tasks_on_disjoint_sets_give_what_they_give_alone(spark):
    together = hora.spark.run(cluster_tasks.regression, args=([3, 5],), num_proc=4)
    alone = {seed: hora.spark.run(cluster_tasks.regression, args=(seed,), num_proc=2) for seed in (3, 5)}
    assert [seed for seed, _ in together] == [3, 3, 5, 5]
    for rank, (seed, weights) in enumerate(together):
        # The members of a set agree, and equal the task run as a job of its own.
        assert weights == together[rank ^ 1][1]
        assert weights == pytest.approx(alone[seed][0][1], abs=1e-12)
    assert together[0][1] != together[2][1]


def test_the_ranks_output_reaches_the_driver_with_rank_prefixes(spark):
    out, err = io.StringIO(), io.StringIO()

    def talk():
        print("to stdout from", os.environ["HORA_RANK"])
        print("to stderr from", os.environ["HORA_RANK"], file=sys.stderr)

    hora.spark.run(talk, num_proc=2, stdout=out, stderr=err)
    assert sorted(out.getvalue().splitlines()) == ["[0]:to stdout from 0", "[1]:to stdout from 1"]
    assert sorted(err.getvalue().splitlines()) == ["[0]:to stderr from 0", "[1]:to stderr from 1"]


def test_a_failing_rank_fails_the_job_naming_it_and_leaves_no_process(spark):
    started = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        hora.spark.run(cluster_tasks.fail_on_rank_one, num_proc=4, stderr=io.StringIO(),
                       env={"HORA_OP_TIMEOUT_SECONDS": str(OP_TIMEOUT)})
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "rank 1 failed first" in message, message
    assert "ValueError: rank 1 found a NaN loss" in message, message
    assert "rank 1 exited with code 1 (the first rank to fail)" in message, message
    assert elapsed < OP_TIMEOUT, f"the failure took {elapsed:.1f} s to surface"
    deadline = time.monotonic() + 5
    while cluster_tasks.child_processes("hora.spark._child") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_tasks.child_processes("hora.spark._child") == []


def test_tasks_that_cannot_start_their_rank_fail_the_job_with_the_reason(spark):
    with pytest.raises(RuntimeError, match=r"(?s)the Spark job failed before its ranks ran:.*/no/such/python"):
        hora.spark.run(cluster_tasks.coordinates, num_proc=2, executable="/no/such/python")
    assert [r["rank"] for r in hora.spark.run(cluster_tasks.coordinates, num_proc=2)] == [0, 1]


def test_more_ranks_than_slots_fail_at_once(spark):
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None)) if hasattr(tracker, "getJobIdsForGroup") else None
    with pytest.raises(ValueError, match=r"num_proc=5 needs 5 task slots .* the cluster has 4"):
        hora.spark.run(cluster_tasks.coordinates, num_proc=5)
    if jobs_before is not None:
        assert len(tracker.getJobIdsForGroup(None)) == jobs_before   # no Spark job was submitted


def test_tasks_that_cannot_start_time_out_and_the_job_is_cancelled(spark):
    # Another job holds every slot for a while: the barrier stage cannot start.
    busy = threading.Thread(target=lambda: spark.sparkContext.parallelize(range(4), 4).foreach(
        lambda _: time.sleep(8)), daemon=True)
    busy.start()
    time.sleep(1.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"0 of 2 tasks started within start_timeout=2 s"):
        hora.spark.run(cluster_tasks.coordinates, num_proc=2, start_timeout=2)
    assert time.monotonic() - started < 8
    busy.join()
    # The cancelled job left nothing behind: the next one runs.
    assert [r["rank"] for r in hora.spark.run(cluster_tasks.coordinates, num_proc=2)] == [0, 1]


def test_the_rendezvous_refuses_a_wrong_secret(spark):
    refusals = hora.spark.run(cluster_tasks.secret_is_checked, num_proc=2)
    assert all(r is not None and "refused the job secret" in r for r in refusals), refusals


@pytest.mark.parametrize("arguments, error, text", [
    ({"num_proc": 0}, ValueError, "num_proc must be a positive integer, got 0"),
    ({"num_proc": "2"}, ValueError, "num_proc must be a positive integer, got '2'"),
    ({"num_proc": 2, "start_timeout": -1}, ValueError, "start_timeout must be a positive number"),
    ({"num_proc": 2, "use_mpi": True}, NotImplementedError, "use_mpi=True is not supported"),
])
def test_bad_arguments_are_named(spark, arguments, error, text):
    with pytest.raises(error, match=text):
        hora.spark.run(cluster_tasks.coordinates, **arguments)


def test_horovod_scripts_run_unchanged_through_the_shim(spark, shim_site, monkeypatch):
    monkeypatch.syspath_prepend(str(shim_site))
    import horovod.spark

    results = horovod.spark.run(cluster_tasks.horovod_training, num_proc=2, env={"PYTHONPATH": str(shim_site)})
    assert len(results) == 2 and results[0] == results[1]


# --- elastic -----------------------------------------------------------------

@pytest.fixture
def quick_discovery(monkeypatch):
    monkeypatch.setenv("HORA_ELASTIC_DISCOVERY_INTERVAL", "0.2")


def test_elastic_survivors_of_a_killed_worker_go_on_from_their_commit(spark, quick_discovery):
    results = hora.spark.run_elastic(cluster_tasks.elastic_regression, args=(12,),
                                     kwargs={"kill_worker": ":3", "kill_step": 5}, num_proc=4, min_num_proc=2,
                                     elastic_timeout=30, stdout=io.StringIO(), stderr=io.StringIO())
    # The host is blacklisted for good (no cooldown): three workers finish.
    assert len(results) == 3
    expected = cluster_tasks.elastic_reference(12, lambda step: 4 if step < 5 else 3)
    for result in results:
        assert result["w"] == pytest.approx(expected, abs=1e-9)
        assert result["rounds"] == [(0, 4, 0), (1, 3, 5)]
    deadline = time.monotonic() + 5
    while cluster_tasks.child_processes("hora.spark._child") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_tasks.child_processes("hora.spark._child") == []


def test_elastic_slot_comes_back_after_the_cooldown(spark, quick_discovery):
    results = hora.spark.run_elastic(cluster_tasks.elastic_regression, args=(60,),
                                     kwargs={"kill_worker": ":3", "kill_step": 5, "step_time": 0.1}, num_proc=4,
                                     min_num_proc=2, elastic_timeout=30, cooldown_range=(1, 2),
                                     stdout=io.StringIO(), stderr=io.StringIO())
    # The task that held the slot offered it again; after the cooldown it got a new worker.
    assert len(results) == 4
    assert len({tuple(r["w"]) for r in results}) == 1
    newcomers = [r for r in results if r["rounds"][0][0] > 0]
    assert len(newcomers) == 1 and newcomers[0]["rounds"][0][1] == 4
    assert all(r["rounds"][1] == (1, 3, 5) for r in results if r["rounds"][0][0] == 0)


def test_elastic_job_grows_when_spark_frees_slots(spark, quick_discovery):
    # Another job holds two slots for a while: the elastic job starts on two
    # tasks, and its other two tasks start, and join, when those slots free up.
    busy = threading.Thread(target=lambda: spark.sparkContext.parallelize(range(2), 2).foreach(
        lambda _: time.sleep(6)), daemon=True)
    busy.start()
    time.sleep(1.5)
    results = hora.spark.run_elastic(cluster_tasks.elastic_regression, args=(120,), kwargs={"step_time": 0.1},
                                     num_proc=2, max_num_proc=4, elastic_timeout=30, stdout=io.StringIO(),
                                     stderr=io.StringIO())
    busy.join()
    assert len(results) == 4
    assert len({tuple(r["w"]) for r in results}) == 1
    first = [r for r in results if r["rounds"][0] == (0, 2, 0)]
    assert len(first) == 2 and all(r["rounds"][-1][1] == 4 for r in first)


def test_elastic_job_below_its_minimum_stops_with_the_reason(spark, quick_discovery):
    with pytest.raises(RuntimeError, match=r"the elastic job stopped: fewer than min_num_proc 4 workers \(3\) "
                                           r"for longer than elastic_timeout 2 s"):
        hora.spark.run_elastic(cluster_tasks.elastic_regression, args=(40,),
                               kwargs={"kill_worker": ":3", "kill_step": 2, "step_time": 0.05}, num_proc=4,
                               elastic_timeout=2, stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.parametrize("arguments, text", [
    ({"num_proc": 2, "min_num_proc": 3}, "max_num_proc 2 is below min_num_proc 3"),
    ({"num_proc": 2, "min_num_proc": 1, "max_num_proc": 1}, "need min_num_proc <= num_proc <= max_num_proc, got 1, 2, 1"),
    ({"num_proc": 2, "max_num_proc": 0}, "max_num_proc must be a positive integer"),
    ({"num_proc": 2, "elastic_timeout": -1}, "elastic_timeout must be a positive number"),
    ({"num_proc": 2, "cooldown_range": (2, 1)}, "cooldown_range must be"),
])
def test_elastic_arguments_are_checked(spark, arguments, text):
    with pytest.raises(ValueError, match=text):
        hora.spark.run_elastic(cluster_tasks.elastic_regression, args=(1,), **arguments)


LOCAL_DRIVER = """
import subprocess
import sys
from pyspark.sql import SparkSession
import hora.spark

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("FATAL")


def rank_and_python():
    import sys
    import hora.numpy as hvd
    hvd.init()
    rank = hvd.rank()
    hvd.shutdown()
    return rank, sys.executable


try:
    print("RESULT", hora.spark.run(rank_and_python, num_proc=2), flush=True)
except RuntimeError as error:
    print("ERROR", error, flush=True)
finally:
    spark.stop()
"""


def run_local_driver(tmp_path, **env_changes):
    script = tmp_path / "driver.py"
    script.write_text(LOCAL_DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(env_changes)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)


def test_local_mode_without_a_python_chosen_runs_the_tasks_on_the_drivers(tmp_path):
    # No PYSPARK_PYTHON, and `python3` on PATH is one without hora (as when
    # a virtual environment's python runs a script without activating it).
    run = run_local_driver(tmp_path, PATH="/usr/bin:/bin")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"RESULT [(0, {sys.executable!r}), (1, {sys.executable!r})]" in run.stdout, run.stdout + run.stderr


def test_tasks_on_a_python_without_hora_fail_saying_what_to_set(tmp_path):
    # PYSPARK_PYTHON names a Python that cannot import hora (here: this one,
    # with a package in front of it on the path that says hora is missing).
    shadow = tmp_path / "shadow" / "hora"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'hora'\", name='hora')\n")
    python = tmp_path / "python-without-hora"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shadow.parent}:$PYTHONPATH exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    run = run_local_driver(tmp_path, PYSPARK_PYTHON=str(python))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ERROR hora.spark.run: the Spark job failed before its ranks ran"), run.stdout
    assert (f"Spark's tasks run {str(python)!r}, which cannot import hora; set PYSPARK_PYTHON "
            "(or spark.pyspark.python) to a Python that has hora installed") in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stdout, run.stdout
