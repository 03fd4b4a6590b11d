"""hora.ray.RayExecutor on a local Ray instance (4 logical CPUs): results in
rank order, process sets inside the function, the first failure surfacing
at once with everything released, placement errors, argument checks."""

import os
import sys
import threading
import time

import cloudpickle
import pytest
import ray
import ray.cloudpickle

import cluster_tasks
from hora.ray import RayExecutor

# Ray sends functions with its own cloudpickle; the actors cannot import
# this module or cluster_tasks, so both travel by value.
for pickler in (cloudpickle, ray.cloudpickle):
    pickler.register_pickle_by_value(cluster_tasks)
    pickler.register_pickle_by_value(sys.modules[__name__])

OP_TIMEOUT = 20


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HORA_OP_TIMEOUT_SECONDS": str(OP_TIMEOUT)}})
    yield
    ray.shutdown()


def released(pids):
    """True once every CPU is free again and the given actor processes ended."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
        if ray.available_resources().get("CPU") == 4 and not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def executor():
    made = []

    def make(**arguments):
        made.append(RayExecutor(RayExecutor.create_settings(timeout_s=30), **arguments))
        return made[-1]

    yield make
    for e in made:
        e.shutdown()


@pytest.mark.parametrize("num_workers", [1, 2, 4])
def test_results_come_back_in_rank_order(executor, num_workers):
    job = executor(num_workers=num_workers)
    job.start()
    results = job.run(cluster_tasks.coordinates)
    assert [r["rank"] for r in results] == list(range(num_workers))
    for rank, result in enumerate(results):
        assert (result["size"], result["local_rank"], result["local_size"]) == (num_workers, rank, num_workers)
        assert (result["cross_rank"], result["cross_size"]) == (0, 1)
        assert result["sum"] == num_workers * (num_workers + 1) / 2
    # A second call runs on the same actors, and the job is still up.
    assert [r["pid"] for r in job.run(cluster_tasks.coordinates)] == [r["pid"] for r in results]
    pids = [r["pid"] for r in results]
    job.shutdown()
    assert released(pids)


def test_two_tasks_on_disjoint_sets_give_what_they_give_alone(executor):
    together = executor(num_workers=4)
    together.start()
    results = together.run(cluster_tasks.regression, args=([3, 5],))
    together.shutdown()
    alone = {}
    for seed in (3, 5):
        job = executor(num_workers=2)
        job.start()
        alone[seed] = job.run(cluster_tasks.regression, args=(seed,))[0][1]
        job.shutdown()
    assert [seed for seed, _ in results] == [3, 3, 5, 5]
    for rank, (seed, weights) in enumerate(results):
        assert weights == results[rank ^ 1][1]
        assert weights == pytest.approx(alone[seed], abs=1e-12)


class Model:
    def __init__(self, scale, offset=0):
        self.scale, self.offset = scale, offset

    def predict(self, x):
        return self.scale * x + self.offset + int(os.environ["HORA_RANK"])


def test_execute_execute_single_and_run_remote(executor):
    job = executor(num_workers=2, env={"HORA_TEST_VALUE": "v"})
    job.start(executable_cls=Model, executable_args=[10], executable_kwargs={"offset": 1},
              extra_env_vars={"HORA_TEST_EXTRA": "e"})
    assert job.execute(lambda model: model.predict(2)) == [21, 22]
    assert job.execute_single(lambda model: model.predict(3)) == 31
    refs = job.run_remote(lambda a: (a, os.environ["HORA_TEST_VALUE"], os.environ["HORA_TEST_EXTRA"]), args=[7])
    assert ray.get(refs) == [(7, "v", "e"), (7, "v", "e")]


def test_a_failing_rank_surfaces_at_once_and_everything_is_released(executor):
    job = executor(num_workers=4)
    job.start()
    pids = [r["pid"] for r in job.run(cluster_tasks.coordinates)]
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 failed while running the function: ValueError: rank 1 found "
                                           r"a NaN loss; every actor and the placement group were released"):
        job.run(cluster_tasks.fail_on_rank_one)
    assert time.monotonic() - started < OP_TIMEOUT
    assert released(pids)
    with pytest.raises(RuntimeError, match="shut down after a failure .*rank 1 failed.*; call start"):
        job.run(cluster_tasks.coordinates)


def test_a_killed_actor_surfaces_at_once_and_everything_is_released(executor):
    job = executor(num_workers=4)
    job.start()
    pids = [r["pid"] for r in job.run(cluster_tasks.coordinates)]
    victim = job.workers[2]
    threading.Timer(1.0, lambda: ray.kill(victim)).start()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 2 failed while running the function: its actor died"):
        job.run(cluster_tasks.collectives_forever)
    assert time.monotonic() - started < OP_TIMEOUT
    assert released(pids)


def test_more_workers_than_the_cluster_has_is_a_placement_error(executor):
    job = executor(num_workers=8, start_timeout=2)
    with pytest.raises(TimeoutError, match=r"could not place 8 workers within 2 s: the placement group needs 8 "
                                           r"bundles of \{'CPU': 1\} \(PACK\); the cluster has 4 CPU free of 4 CPU"):
        job.start()
    assert released([])
    assert job.workers == []


def test_the_rendezvous_refuses_a_wrong_secret(executor):
    job = executor(num_workers=2)
    job.start()
    refusals = job.run(cluster_tasks.secret_is_checked)
    assert all(r is not None and "refused the job secret" in r for r in refusals), refusals


@pytest.mark.parametrize("arguments, error, text", [
    ({"num_workers": 0}, ValueError, "num_workers must be a positive number, got 0"),
    ({}, ValueError, "give num_workers"),
    ({"num_workers": 2, "num_hosts": 1}, ValueError, "not both"),
    ({"num_workers": 2, "placement_strategy": "ANYWHERE"}, ValueError, "placement_strategy must be one of"),
    ({"num_workers": 2, "start_timeout": 0}, ValueError, "start_timeout must be a positive number"),
])
def test_bad_arguments_are_named(arguments, error, text):
    with pytest.raises(error, match=text):
        RayExecutor(**arguments)


def test_calls_before_start_and_callbacks_are_refused(executor):
    job = executor(num_workers=1)
    with pytest.raises(RuntimeError, match="call start"):
        job.run(cluster_tasks.coordinates)
    job.start()
    with pytest.raises(NotImplementedError, match="callbacks"):
        job.run(cluster_tasks.coordinates, callbacks=[print])
    with pytest.raises(RuntimeError, match="start\\(\\) was called already"):
        job.start()


def test_horovod_scripts_run_unchanged_through_the_shim(shim_site, monkeypatch):
    monkeypatch.syspath_prepend(str(shim_site))
    from horovod.ray import RayExecutor as HorovodRayExecutor

    def with_the_shim():
        sys.path.insert(0, str(shim_site))   # the actors' Python finds the horovod package there
        return cluster_tasks.horovod_training()

    job = HorovodRayExecutor(HorovodRayExecutor.create_settings(timeout_s=30), num_workers=2, cpus_per_worker=1,
                             use_gpu=False)
    job.start()
    try:
        results = job.run(with_the_shim)
    finally:
        job.shutdown()
    assert len(results) == 2 and results[0] == results[1]


# --- elastic -----------------------------------------------------------------

@pytest.fixture
def quick_discovery(monkeypatch):
    monkeypatch.setenv("HORA_ELASTIC_DISCOVERY_INTERVAL", "0.2")


def test_elastic_survivors_of_a_killed_actor_go_on_from_their_commit(quick_discovery):
    from hora.ray import ElasticRayExecutor

    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=4, elastic_timeout=30)
    job = ElasticRayExecutor(settings, cpus_per_slot=1)
    job.start()
    started = time.monotonic()
    results = job.run(lambda: cluster_tasks.elastic_regression(12, kill_worker=":3", kill_step=5))
    # The killed actor's node is blacklisted for good (no cooldown): three workers finish.
    assert len(results) == 3
    expected = cluster_tasks.elastic_reference(12, lambda step: 4 if step < 5 else 3)
    for result in results:
        assert result["w"] == pytest.approx(expected, abs=1e-9)
        assert result["rounds"] == [(0, 4, 0), (1, 3, 5)]
    assert time.monotonic() - started < 60
    assert released([])


def test_elastic_workers_come_back_after_the_cooldown(quick_discovery):
    from hora.ray import ElasticRayExecutor

    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=4, elastic_timeout=30,
                                                  cooldown_range=(1, 2))
    job = ElasticRayExecutor(settings, cpus_per_slot=1)
    job.start()
    results = job.run(lambda: cluster_tasks.elastic_regression(60, kill_worker=":3", kill_step=5, step_time=0.1))
    # The node came back: a new worker joined, received the state and trained to the end at size 4.
    assert len(results) == 4
    assert len({tuple(r["w"]) for r in results}) == 1
    newcomer = [r for r in results if r["rounds"][0][0] > 0]
    assert len(newcomer) == 1 and newcomer[0]["rounds"][0][1] == 4
    survivor_rounds = [r["rounds"] for r in results if r["rounds"][0][0] == 0]
    assert all(rounds[1] == (1, 3, 5) and rounds[-1][1] == 4 for rounds in survivor_rounds)
    assert released([])


def test_elastic_job_that_cannot_go_on_raises_why(quick_discovery):
    from hora.ray import ElasticRayExecutor

    settings = ElasticRayExecutor.create_settings(min_num_proc=4, max_num_proc=4, elastic_timeout=2)
    job = ElasticRayExecutor(settings, cpus_per_slot=1)
    job.start()
    with pytest.raises(RuntimeError, match=r"the elastic job stopped: fewer than min_num_proc 4 workers \(3\) "
                                           r"for longer than elastic_timeout 2 s"):
        job.run(lambda: cluster_tasks.elastic_regression(40, kill_worker=":3", kill_step=2, step_time=0.05))
    assert released([])


@pytest.mark.parametrize("arguments, text", [
    ({"min_num_proc": 0}, "min_num_proc must be a positive integer"),
    ({"min_num_proc": 3, "max_num_proc": 2}, "max_num_proc 2 is below min_num_proc 3"),
    ({"elastic_timeout": 0}, "elastic_timeout must be a positive number"),
    ({"cooldown_range": (3, 1)}, "cooldown_range must be"),
])
def test_elastic_settings_are_checked(arguments, text):
    from hora.ray import ElasticRayExecutor

    with pytest.raises(ValueError, match=text):
        ElasticRayExecutor.create_settings(**arguments)


def test_a_ray_executor_with_min_workers_is_elastic(quick_discovery):
    job = RayExecutor(min_workers=2, max_workers=4, elastic_timeout=30)
    job.start()
    results = job.run(cluster_tasks.elastic_regression, args=(6,))
    expected = cluster_tasks.elastic_reference(6, lambda step: 4)
    assert [r["rounds"] for r in results] == [[(0, 4, 0)]] * 4
    assert all(r["w"] == pytest.approx(expected, abs=1e-9) for r in results)
    with pytest.raises(NotImplementedError, match="supports run\\(\\) only"):
        job.execute(lambda executable: None)
    assert released([])
