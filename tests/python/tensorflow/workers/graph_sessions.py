"""hora.tensorflow in TensorFlow 1 graphs (tf.compat.v1 sessions), on the
global set and on [0,2] and [1,3] at once: many independent ops in one run
of a session with two inter-op threads (each rank's session picks its own
order), the broadcast gradient that is zero on all but the root, followed
by more ops; a mismatch, then more ops; the object functions; the TensorFlow 1 DistributedOptimizer.
Prints "ok <check> <set> - <mode>" or "FAIL <check> ...", then "graph
sessions done failures=N"."""

import traceback

import numpy as np
import tensorflow as tf

import hora.tensorflow as hvd
from hora.errors import MismatchError

hvd.init()
me = hvd.rank()
assert hvd.size() == 4
SETS = {"global": hvd.global_process_set, "even": hvd.ProcessSet([0, 2]), "odd": hvd.ProcessSet([1, 3])}
failures = 0
# Two threads for many ops: were an op a node that holds a thread while it
# waits, the ranks' different orders would leave each waiting on others.
CONFIG = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=1)


def report(check, label, mode, fn):
    """Runs ``fn`` (which asserts) and prints its outcome in one write."""
    global failures
    try:
        fn()
    except Exception:
        failures += 1
        print(f"FAIL {check} {label} - {mode}\n{traceback.format_exc()}", flush=True)
    else:
        print(f"ok {check} {label} - {mode}", flush=True)


def session_check(fn):
    """``fn(session)`` in a fresh TensorFlow 1 graph and session."""
    def check():
        with tf.Graph().as_default(), tf.compat.v1.Session(config=CONFIG) as session:
            fn(session)
    return check


def many_independent_ops(ps, ranks):
    """Twelve ops per step, none depending on another; every step runs all
    ops made so far (as Horovod's _fused tests do), three times."""
    def check(session):
        made, expected = [], []
        dtypes = (tf.uint8, tf.int32, tf.int64, tf.float16, tf.float32, tf.float64)
        for step in range(3):
            for dtype in dtypes:
                # The values depend on the rank, so each rank's graph
                # optimiser folds them its own way.
                x = tf.cast(tf.ones([3, 2]) * me, dtype)
                made.append(hvd.allgather(x, process_set=ps))
                expected.append(np.repeat(np.array(ranks, np.float64), 3)[:, None] * np.ones([1, 2]))
                made.append(hvd.allreduce(tf.cast(tf.ones([4]) * me, dtype), op=hvd.Sum, process_set=ps))
                expected.append(np.full([4], float(sum(ranks))))
            for value, want in zip(session.run(made), expected):
                assert np.array_equal(np.asarray(value, np.float64), want), (value, want)
    return check


def broadcast_gradient_then_more(ps, ranks):
    """The broadcast's gradient is zero except on the root; its allreduce
    still runs on every member, so later ops in the graph line up."""
    def check(session):
        for root in ranks:
            x = tf.ones([5]) * me
            y = hvd.broadcast(x, root, process_set=ps)
            grad = tf.gradients(y, x, tf.ones([5]))[0]
            expected = np.ones([5]) * (1.0 if me == root else 0.0)
            assert np.array_equal(session.run(grad), expected), root
            summed = session.run(hvd.allreduce(tf.ones([2]) * me, op=hvd.Sum, process_set=ps))
            assert np.array_equal(summed, np.full([2], float(sum(ranks)))), summed
    return check


def broadcast_gradient_in_tf_function(ps, ranks):
    """The same inside tf.function, where later ops are named after tensors
    (mul_N) that every member must number alike."""
    def check():
        for root in ranks:
            @tf.function
            def step():
                x = tf.ones([5]) * me
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = hvd.broadcast(x, root, process_set=ps)
                grad = tape.gradient(y, x)
                return grad, hvd.allgather(tf.ones([1, 2]) * me, process_set=ps)

            grad, gathered = step()
            assert np.array_equal(grad.numpy(), np.ones([5]) * (1.0 if me == root else 0.0)), root
            assert np.array_equal(gathered.numpy()[:, 0], np.array(ranks, np.float32)), gathered
    return check


def mismatch_then_more(ps, ranks):
    """A mismatched op fails on every member with Horovod's class (and
    TensorFlow's for a failed node); the set goes on."""
    def check(session):
        i = ranks.index(me)
        try:
            session.run(hvd.allreduce(tf.ones([2 + i]), process_set=ps))
        except MismatchError as error:
            for kind in (tf.errors.FailedPreconditionError, tf.errors.UnknownError, hvd.HorovodInternalError):
                assert isinstance(error, kind), type(error).__mro__
            assert "shape" in str(error), str(error)
        else:
            raise AssertionError("no MismatchError")
        summed = session.run(hvd.allreduce(tf.ones([2]), op=hvd.Sum, process_set=ps))
        assert np.array_equal(summed, [len(ranks)] * 2), summed
    return check


def objects(ps, ranks):
    def check(session):
        root = ranks[-1]
        value = {"from": me, "list": [me] * 2}
        assert hvd.broadcast_object(value, root_rank=root, session=session, process_set=ps) == \
            {"from": root, "list": [root] * 2}
        assert hvd.broadcast_object_fn(root_rank=root, session=session, process_set=ps)(me) == root
        assert hvd.allgather_object({"r": me}, session=session, process_set=ps) == [{"r": r} for r in ranks]
        # The graph's ops still line up after them.
        assert session.run(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps)) == len(ranks)
    return check


def objects_refused_in_tf_function(ps, ranks):
    def check():
        for call in (lambda: hvd.allgather_object(me, process_set=ps),
                     lambda: hvd.broadcast_object(me, root_rank=ranks[0], process_set=ps)):
            try:
                tf.function(call)()
            except ValueError as error:
                assert "tf.function" in str(error), str(error)
            else:
                raise AssertionError("no ValueError inside tf.function")
    return check


def legacy_optimizer(ps, ranks, mode):
    """loss = sum(v * (rank + 1)): each member's gradient is rank + 1; the
    wrapped optimizer applies their average over the set."""
    mean = float(np.mean([r + 1 for r in ranks]))

    def graph(session):
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([1.0, 2.0]), use_resource=True)
        loss = tf.reduce_sum(v * float(me + 1))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), process_set=ps)
        assert isinstance(opt, tf.compat.v1.train.Optimizer) and opt.process_set is ps
        pairs = opt.compute_gradients(loss)
        step = opt.apply_gradients(pairs)
        session.run(tf.compat.v1.global_variables_initializer())
        assert np.array_equal(session.run(pairs[0][0]), [mean, mean])
        session.run(step)
        assert np.allclose(session.run(v), [1.0 - 0.5 * mean, 2.0 - 0.5 * mean])
        session.run(opt.minimize(loss))
        assert np.allclose(session.run(v), [1.0 - mean, 2.0 - mean])

    def eager():
        v = tf.Variable([1.0, 2.0])
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), process_set=ps)
        opt.minimize(lambda: tf.reduce_sum(v * float(me + 1)), var_list=[v])
        assert np.allclose(v.numpy(), [1.0 - 0.5 * mean, 2.0 - 0.5 * mean]), v.numpy()

    return session_check(graph) if mode == "session" else eager


def legacy_optimizer_bad_input():
    try:
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), backward_passes_per_step=2)
    except ValueError as error:
        assert "backward_passes_per_step" in str(error), str(error)
    else:
        raise AssertionError("no ValueError for backward_passes_per_step=2")


for label, ps in SETS.items():
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    if me not in ranks:
        continue
    report("many_independent_ops", label, "session", session_check(many_independent_ops(ps, ranks)))
    report("broadcast_gradient_then_more", label, "session", session_check(broadcast_gradient_then_more(ps, ranks)))
    report("broadcast_gradient_then_more", label, "tf.function", broadcast_gradient_in_tf_function(ps, ranks))
    report("mismatch_then_more", label, "session", session_check(mismatch_then_more(ps, ranks)))
    report("objects", label, "session", session_check(objects(ps, ranks)))
    report("objects_refused_in_tf_function", label, "eager", objects_refused_in_tf_function(ps, ranks))
    for mode in ("session", "eager"):
        report("legacy_optimizer", label, mode, legacy_optimizer(ps, ranks, mode))
report("legacy_optimizer_bad_input", "global", "eager", legacy_optimizer_bad_input)
hvd.barrier()
print(f"graph sessions done failures={failures}", flush=True)
