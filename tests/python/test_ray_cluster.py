"""hora.ray.RayExecutor on a two-node Ray cluster (two raylets on this
machine, ray.cluster_utils.Cluster): ranks are contiguous per node, local
and cross ranks follow the nodes, and the job's collectives cross them."""

import sys

import cloudpickle
import pytest
import ray
import ray.cloudpickle
from ray.cluster_utils import Cluster

import cluster_tasks
from hora.ray import RayExecutor

# Ray sends functions with its own cloudpickle; the actors cannot import
# this module or cluster_tasks, so both travel by value.
for pickler in (cloudpickle, ray.cloudpickle):
    pickler.register_pickle_by_value(cluster_tasks)
    pickler.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def where():
    import ray as ray_in_actor

    return ray_in_actor.get_runtime_context().get_node_id()


@pytest.mark.parametrize("strategy", ["SPREAD", "PACK"])
def test_local_and_cross_ranks_follow_the_nodes(two_nodes, strategy):
    job = RayExecutor(num_workers=4, placement_strategy=strategy)
    job.start()
    try:
        results = job.run(cluster_tasks.coordinates)
        nodes = job.run(where)
    finally:
        job.shutdown()
    assert len(set(nodes)) == 2
    # Ranks 0-1 on the node of rank 0, 2-3 on the other.
    assert nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2]
    assert [(r["local_rank"], r["local_size"]) for r in results] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert [(r["cross_rank"], r["cross_size"]) for r in results] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert all(r["sum"] == 10 for r in results)


def test_num_hosts_places_workers_per_host(two_nodes):
    job = RayExecutor(num_hosts=2, num_workers_per_host=2)
    job.start()
    try:
        nodes = job.run(where)
        results = job.run(cluster_tasks.coordinates)
    finally:
        job.shutdown()
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
    assert [r["cross_rank"] for r in results] == [0, 0, 1, 1]
