"""hora.tensorflow in TensorFlow 1 graphs (tf.compat.v1 sessions) on 4
ranks, on the global set and on [0,2] and [1,3] at once, in one horarun job
(workers/graph_sessions.py): many independent ops in one run of a session
with fewer threads than ops (each rank's session orders them its own way,
and a set whose members wait on different ops stops); the broadcast
gradient, zero on all but the root, followed by more ops (in a session and
inside tf.function, where later ops are named after tensors every member
must number alike); a mismatched op
(Horovod's error class on every member), followed by more ops; broadcast_object,
broadcast_object_fn and allgather_object in a graph (and refused inside
tf.function); DistributedOptimizer of a tf.compat.v1.train optimizer, in a
graph and eagerly."""

import pytest
from tf_helpers import describe, failed, passed, run_tf_worker

RANKS = {"global": [0, 1, 2, 3], "even": [0, 2], "odd": [1, 3]}
CHECKS = {"many_independent_ops": ("session",), "broadcast_gradient_then_more": ("session", "tf.function"),
          "mismatch_then_more": ("session",), "objects": ("session",), "objects_refused_in_tf_function": ("eager",),
          "legacy_optimizer": ("session", "eager")}


@pytest.fixture(scope="module")
def job():
    # A stuck set fails within 60 s (tf_helpers), well inside the job's time.
    result = run_tf_worker("graph_sessions.py", timeout=420)
    finished = result.stdout.count("graph sessions done failures=0")
    assert (result.returncode, finished) == (0, 4), describe(result)
    return result


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_passes_on_every_member_of_every_set(job, check):
    assert not failed(job, check), describe(job)
    expected = sorted((rank, label, "-", mode) for label, ranks in RANKS.items() for rank in ranks
                      for mode in CHECKS[check])
    assert sorted(passed(job, check)) == expected, describe(job)


def test_the_legacy_optimizer_refuses_what_it_does_not_do(job):
    assert sorted(rank for rank, *_ in passed(job, "legacy_optimizer_bad_input")) == [0, 1, 2, 3], describe(job)
