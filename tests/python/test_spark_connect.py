"""hora.spark.run under Spark Connect (a local Connect server, 4 slots): the
job runs through the DataFrame API (mapInArrow in barrier mode)."""

import io
import os
import sys

import cloudpickle
import pytest

import cluster_tasks
import hora.spark

cloudpickle.register_pickle_by_value(cluster_tasks)


@pytest.fixture(scope="module")
def connect():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = SparkSession.builder.remote("local[4]").getOrCreate()
    yield session
    session.stop()


def test_results_come_back_in_rank_order(connect):
    results = hora.spark.run(cluster_tasks.coordinates, num_proc=4, spark=connect)
    assert [(r["rank"], r["size"], r["sum"]) for r in results] == [(r, 4, 10.0) for r in range(4)]


def test_two_tasks_on_disjoint_sets(connect):
    results = hora.spark.run(cluster_tasks.regression, args=([3, 5],), num_proc=4, spark=connect)
    assert [seed for seed, _ in results] == [3, 3, 5, 5]
    assert results[0][1] == results[1][1] != results[2][1] == results[3][1]


def test_a_failing_rank_is_named(connect):
    with pytest.raises(RuntimeError, match=r"(?s)rank 1 failed first.*ValueError: rank 1 found a NaN loss"):
        hora.spark.run(cluster_tasks.fail_on_rank_one, num_proc=4, spark=connect, stderr=io.StringIO())


def test_num_proc_is_required_where_the_slots_are_not_known(connect):
    with pytest.raises(ValueError, match="give num_proc"):
        hora.spark.run(cluster_tasks.coordinates, spark=connect)
