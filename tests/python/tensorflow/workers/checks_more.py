"""The second half of collectives.py's matrix: gradients against their closed
forms, DistributedGradientTape, broadcast_variables and the object
functions, join and barrier, mismatched ops and bad input."""

import numpy as np
import tensorflow as tf

import hora.tensorflow as hvd
from hora.errors import HorovodInternalError, MismatchError

me = hvd.rank()
GRAD_DTYPES = (tf.float32, tf.float64)


def raises(kinds, fn, *texts):
    try:
        fn()
    except kinds as error:
        for text in texts:
            assert text in str(error), f"{text!r} not in {str(error)!r}"
        return error
    raise AssertionError(f"no {kinds} raised")


def assert_equal(actual, expected):
    assert actual == expected, (actual, expected)


def gradients_of(ps, ranks, dtype):
    i, n, root = ranks.index(me), len(ranks), ranks[-1]
    splits = [j + 1 for j in range(n)]
    offsets = np.concatenate([[0], np.cumsum(splits)])
    rows = 2 * n + 1
    weight = float(me + 1)
    total_rows = n * (n + 1) // 2
    c = tf.constant(np.arange(total_rows * 2).reshape(total_rows, 2), dtype=dtype)

    def run(x, gathered, exchanged, scattered):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, gathered, exchanged, scattered])
            losses = {
                "grad_allreduce_sum": tf.reduce_sum(hvd.allreduce(x, op=hvd.Sum, process_set=ps) * weight),
                "grad_allreduce_average": tf.reduce_sum(hvd.allreduce(x, process_set=ps) * weight),
                "grad_grouped_allreduce": tf.add_n([tf.reduce_sum(y * weight) for y in hvd.grouped_allreduce(
                    [x, x], op=hvd.Sum, process_set=ps)]),
                "grad_allgather": tf.reduce_sum(hvd.allgather(gathered, process_set=ps) * c),
                "grad_broadcast": tf.reduce_sum(hvd.broadcast(x, root, process_set=ps) * weight),
                "grad_alltoall": tf.reduce_sum(hvd.alltoall(exchanged, splits=splits, process_set=ps)[0] * weight),
                "grad_reducescatter_sum": tf.reduce_sum(hvd.reducescatter(scattered, op=hvd.Sum, process_set=ps)
                                                        * weight),
                "grad_reducescatter_average": tf.reduce_sum(hvd.reducescatter(scattered, process_set=ps) * weight),
            }
        sources = {"grad_allgather": gathered, "grad_alltoall": exchanged, "grad_reducescatter_sum": scattered,
                   "grad_reducescatter_average": scattered}
        return {name: tape.gradient(loss, sources.get(name, x)) for name, loss in losses.items()}

    x = tf.ones([2, 3], dtype=dtype)
    gathered = tf.ones([i + 1, 2], dtype=dtype)
    exchanged = tf.ones([int(offsets[-1]), 2], dtype=dtype)
    scattered = tf.ones([rows, 2], dtype=dtype)
    weights = [r + 1.0 for r in ranks]
    scatter_rows = [hvd.mpi_ops.reducescatter_rows(rows, n, j) for j in range(n)]
    by_block = np.concatenate([np.full((count, 2), w) for count, w in zip(scatter_rows, weights)])
    expected = {
        "grad_allreduce_sum": np.full((2, 3), sum(weights)),
        "grad_allreduce_average": np.full((2, 3), sum(weights) / n),
        "grad_grouped_allreduce": np.full((2, 3), 2 * sum(weights)),
        "grad_allgather": c.numpy()[offsets[i]:offsets[i + 1]],
        "grad_broadcast": np.full((2, 3), sum(weights) / n if me == root else 0.0),
        "grad_alltoall": np.concatenate([np.full((splits[j], 2), weights[j]) for j in range(n)]),
        "grad_reducescatter_sum": by_block * n,
        "grad_reducescatter_average": by_block,
    }
    return run, (x, gathered, exchanged, scattered), expected


def check_gradients(label, ps, ranks, report, equal, in_mode):
    for dtype in GRAD_DTYPES:
        for mode in ("eager", "graph"):
            run, args, expected = gradients_of(ps, ranks, dtype)
            grads = in_mode(run, mode)(*args)
            for name, value in expected.items():
                report(name, label, dtype, mode, lambda name=name, value=value: equal(grads[name], value, 1e-6))


def check_tape(label, ps, ranks, report, equal, in_mode):
    """DistributedGradientTape: the gradient averaged (or summed) over the set."""
    xs = {r: float(r + 1) for r in ranks}
    w0 = np.array([1.0, -2.0])

    def step(w, op, options):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(w * xs[me])) + tf.reduce_sum(tf.gather(w, [0]))
        tape = hvd.DistributedGradientTape(tape, op=op, process_set=ps, **options)
        grad = tape.gradient(loss, [w])[0]
        return tf.convert_to_tensor(grad)

    local = {r: 2 * xs[r] ** 2 * w0 + np.array([1.0, 0.0]) for r in ranks}
    for name, op, options, expected in (
            ("tape_average", hvd.Average, {}, np.mean([local[r] for r in ranks], axis=0)),
            ("tape_sum_groups_fp16", hvd.Sum, {"groups": 1, "compression": hvd.Compression.fp16},
             np.sum([local[r] for r in ranks], axis=0)),
            ("tape_predivide_sparse_as_dense", hvd.Average, {"gradient_predivide_factor": 2.0,
                                                             "sparse_as_dense": True},
             np.mean([local[r] for r in ranks], axis=0))):
        for mode in ("eager", "graph"):
            w = tf.Variable(w0)
            fn = in_mode(lambda op=op, options=options: step(w, op, options), mode)
            report(name, label, tf.float64, mode, lambda fn=fn, expected=expected: equal(fn(), expected, 0.1))


def check_tape_packed(label, ps, ranks, report, equal, in_mode):
    """DistributedGradientTape over gradients it packs into one allreduce per
    dtype (small dense float32 and float64 ones) beside those it does not (a
    1.2 MB one, a sparse one): each gradient averaged (or summed) on its own."""
    x = float(me + 1)
    starts = {"a": np.array([1.0, 2.0, 3.0], np.float32), "b": np.ones((2, 2), np.float32),
              "c": np.array([0.5, 1.0, 1.5, 2.0]), "d": np.array([4.0]),
              "big": np.linspace(0.0, 1.0, 300000, dtype=np.float32), "e": np.zeros(5, np.float32)}

    def step(variables, op, options):
        with tf.GradientTape() as tape:
            v = variables
            loss = (tf.reduce_sum(tf.square(v["a"])) * x + tf.reduce_sum(v["b"]) * x + tf.reduce_sum(v["big"]) * x
                    + tf.cast(tf.reduce_sum(v["c"] ** 3) * x + tf.reduce_sum(v["d"]) * x, tf.float32)
                    + tf.reduce_sum(tf.gather(v["e"], [1, 3])))
        tape = hvd.DistributedGradientTape(tape, op=op, process_set=ps, **options)
        grads = tape.gradient(loss, [variables[k] for k in sorted(starts)])
        return [tf.convert_to_tensor(g) for g in grads]

    mean_x = np.mean([r + 1.0 for r in ranks])
    per_x = {"a": 2 * starts["a"], "b": np.ones((2, 2)), "big": np.ones(300000), "c": 3 * starts["c"] ** 2,
             "d": np.ones(1)}
    average = [per_x[k] * mean_x if k != "e" else np.array([0.0, 1.0, 0.0, 1.0, 0.0]) for k in sorted(starts)]
    for name, op, options, expected, tolerance in (
            ("tape_packed_average", hvd.Average, {}, average, 1e-4),
            ("tape_packed_sum_fp16", hvd.Sum, {"compression": hvd.Compression.fp16},
             [e * len(ranks) for e in average], 0.1)):
        for mode in ("eager", "graph"):
            variables = {k: tf.Variable(v) for k, v in starts.items()}
            fn = in_mode(lambda op=op, options=options, variables=variables: step(variables, op, options), mode)
            report(name, label, tf.float64, mode,
                   lambda fn=fn, expected=expected, tolerance=tolerance:
                   [equal(g, e, tolerance) for g, e in zip(fn(), expected)])


def check_optimizer_numpy_gradients(label, ps, ranks, report, equal, in_mode):
    """The Keras DistributedOptimizer given gradients that are not tensors
    (NumPy arrays, as apply_gradients accepts): averaged as tensors are."""
    import keras

    import hora.tensorflow.keras as hvd_keras

    x = float(me + 1)
    for mode in ("eager", "graph"):
        variables = [keras.Variable(np.zeros(3, np.float32)), keras.Variable(np.zeros((2, 2), np.float32))]
        optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0), process_set=ps)
        optimizer.build(variables)  # outside tf.function, as Keras asks
        grads = [np.full(3, x, np.float32), np.full((2, 2), 2 * x, np.float32)]

        def apply(optimizer=optimizer, variables=variables, grads=grads):
            # Closed over, not arguments: tf.function would make tensors of them.
            return lambda: optimizer.apply_gradients(zip(grads, variables))
        in_mode(apply(), mode)()
        mean_x = np.mean([r + 1.0 for r in ranks])
        report("optimizer_numpy_gradients", label, tf.float64, mode,
               lambda variables=variables, mean_x=mean_x: [equal(variables[0].numpy(), np.full(3, -mean_x), 1e-5),
                                                           equal(variables[1].numpy(), np.full((2, 2), -2 * mean_x),
                                                                 1e-5)])


def check_functions(label, ps, ranks, report, equal, in_mode):
    root = ranks[-1]
    for mode in ("eager", "graph"):
        variables = [tf.Variable(np.full((2,), float(me))), tf.Variable(np.full((3,), me, dtype=np.int32))]
        in_mode(lambda: hvd.broadcast_variables(variables, root_rank=root, process_set=ps), mode)()
        report("broadcast_variables", label, None, mode,
               lambda: [equal(v, np.full(v.shape, root)) for v in variables])
        v = tf.Variable(np.full((2,), float(me)))
        in_mode(lambda: hvd.broadcast_([v], root, process_set=ps), mode)()
        report("broadcast_", label, None, mode, lambda: equal(v, np.full((2,), root)))
    report("broadcast_object", label, None, "eager",
           lambda: equal(hvd.broadcast_object({"from": me}, root_rank=root, process_set=ps)["from"], root))
    report("allgather_object", label, None, "eager",
           lambda: assert_equal(hvd.allgather_object(("rank", me), process_set=ps), [("rank", r) for r in ranks]))

    def joined():
        last = int(hvd.join(process_set=ps))
        assert last in ranks, last
        equal(hvd.allgather(tf.constant([last]), process_set=ps), [last] * len(ranks))

    report("join", label, None, "eager", joined)
    report("barrier", label, None, "eager", lambda: hvd.barrier(process_set=ps))


def check_sync_batch_norm(label, ps, ranks, report, equal, in_mode):
    """The layer normalizes with the statistics of every member's batch together."""
    i = ranks.index(me)
    x = tf.constant(np.arange((i + 2) * 3, dtype=np.float32).reshape(i + 2, 3) * (me + 1))
    everything = np.concatenate([np.arange((j + 2) * 3, dtype=np.float32).reshape(j + 2, 3) * (r + 1)
                                 for j, r in enumerate(ranks)])
    expected = (x.numpy() - everything.mean(axis=0)) / np.sqrt(everything.var(axis=0) + 1e-3)
    for mode in ("eager", "graph"):
        layer = hvd.SyncBatchNormalization(epsilon=1e-3, process_set=ps)
        layer.build(x.shape)
        fn = in_mode(lambda layer=layer: layer(x, training=True), mode)
        report("sync_batch_norm", label, None, mode, lambda fn=fn: equal(fn(), expected, 1e-4))


def check_mismatches(label, ps, ranks, report, equal, in_mode):
    """Members that disagree on shape or dtype all get the error."""
    i = ranks.index(me)
    for mode in ("eager", "graph"):
        shape_fn = in_mode(lambda: hvd.allreduce(tf.ones([2 + i]), process_set=ps), mode)
        report("mismatch_shape", label, None, mode, lambda: raises(
            (MismatchError,), shape_fn, "shape"))
        dtype_fn = in_mode(lambda: hvd.allgather(tf.ones([2], dtype=tf.float32 if i % 2 else tf.int32),
                                                 process_set=ps), mode)

        # Horovod's class; inside tf.function also TensorFlow's class for a
        # failed py_function (docs/frameworks.md, "Errors").
        tf_classes = (tf.errors.FailedPreconditionError,) + (() if mode == "eager" else (tf.errors.UnknownError,))

        def dtype_mismatch(tf_classes=tf_classes):
            error = raises((MismatchError,), dtype_fn)
            assert all(isinstance(error, c) for c in tf_classes + (HorovodInternalError,)), type(error).__mro__

        report("mismatch_dtype", label, None, mode, dtype_mismatch)
    # The set still works.
    report("after_mismatch", label, None, "eager",
           lambda: equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum, process_set=ps), [len(ranks)] * 2))


def check_bad_input(report, in_mode):
    x = tf.ones([4, 2])
    odd = hvd.ProcessSet([1, 3])
    cases = {
        "string": (lambda: hvd.allreduce("abc"), ValueError, "str"),
        "ragged": (lambda: hvd.allreduce([[1.0, 2.0], [3.0]]), ValueError, "cannot be made"),
        "dtype": (lambda: hvd.allgather(tf.constant(["a"])), ValueError, "unsupported dtype string"),
        "op": (lambda: hvd.allreduce(x, op="sum"), ValueError, "unknown reduction op"),
        "root_type": (lambda: hvd.broadcast(x, root_rank="0"), ValueError, "root_rank must be an integer"),
        "root_range": (lambda: hvd.broadcast(x, root_rank=7), ValueError, "root"),
        "process_set": (lambda: hvd.allreduce(x, process_set="odd"), ValueError, "process_set must be a ProcessSet"),
        "reducescatter_op": (lambda: hvd.reducescatter(x, op=hvd.Min), ValueError, "Sum and Average"),
        "splits": (lambda: hvd.alltoall(x, splits=[1, 1, 1, 9]), ValueError, "split"),
        "grouped_single": (lambda: hvd.grouped_allgather(x), ValueError, "needs a list"),
        "sparse_op": (lambda: hvd.allreduce(tf.IndexedSlices(x, tf.constant([0, 1, 2, 3])), op=hvd.Min),
                      NotImplementedError, "Sum and Average"),
        "tape": (lambda: hvd.DistributedGradientTape("tape"), ValueError, "tf.GradientTape"),
        "scalar_gather": (lambda: hvd.allgather(tf.constant(1.0)), ValueError, "dimension"),
        "xla": (lambda: tf.function(lambda: hvd.allreduce(x), jit_compile=True)(), ValueError, "XLA-compiled"),
    }
    if not odd.included():
        cases["non_member"] = (lambda: hvd.allreduce(x, process_set=odd), ValueError, "not a member")
    for name, (fn, kind, text) in cases.items():
        report(f"bad_input_{name}", "global", None, "eager", lambda fn=fn, kind=kind, text=text: raises(kind, fn, text))
    graph_root = tf.function(lambda: hvd.broadcast(x, root_rank=7))

    def graph_bad_root():
        error = raises((tf.errors.InvalidArgumentError,), graph_root, "root")
        assert isinstance(error, ValueError), type(error).__mro__

    report("bad_input_graph_root_range", "global", None, "graph", graph_bad_root)


def run_all(sets, report, equal, in_mode):
    for label, ps in sets.items():
        ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
        if me not in ranks:
            continue
        for check in (check_gradients, check_tape, check_tape_packed, check_optimizer_numpy_gradients, check_functions, check_sync_batch_norm, check_mismatches):
            check(label, ps, ranks, report, equal, in_mode)
    check_bad_input(report, in_mode)
