"""Every hora.tensorflow collective on the global set and on [0,2], [1,3],
[1,2,3], for float32/float64/float16/int32/int64, eagerly and inside
tf.function, with values checked; then the gradients against their
closed forms, the functions on variables and objects, mismatches and bad
input. Run on 4 ranks; prints one line per check:

    ok <check> <set> <dtype> <mode>        (or FAIL ... and the error)
"""

import sys
import traceback

import numpy as np
import tensorflow as tf

import hora.tensorflow as hvd

hvd.init()
me = hvd.rank()
assert hvd.size() == 4

SETS = {
    "global": hvd.global_process_set,
    "even": hvd.ProcessSet([0, 2]),
    "odd": hvd.ProcessSet([1, 3]),
    "upper": hvd.add_process_set(hvd.ProcessSet([1, 2, 3])),
}
DTYPES = [tf.float32, tf.float64, tf.float16, tf.int32, tf.int64]
MODES = ("eager", "graph")
failures = 0


def say(line):
    """One write per line: mpirun tags output by the chunk, not by the line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def report(check, label, dtype, mode, fn):
    """Runs ``fn`` (which asserts) and prints its outcome."""
    global failures
    where = f"{check} {label} {dtype.name if dtype is not None else '-'} {mode}"
    try:
        fn()
        say(f"ok {where}")
    except Exception:
        failures += 1
        say(f"FAIL {where}\n{traceback.format_exc()}")


def equal(actual, expected, tolerance=0.0):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.allclose(actual.astype(np.float64), expected.astype(np.float64), atol=tolerance, rtol=0), \
        f"\n{actual}\n!=\n{expected}"


def in_mode(fn, mode):
    return fn if mode == "eager" else tf.function(fn)


def ops_under_test(ps, ranks, dtype):
    """Runs every collective once on ``ps``; returns name -> (result, expected, tolerance)."""
    i, n, root = ranks.index(me), len(ranks), ranks[-1]
    floating = dtype.is_floating
    base = np.arange(6).reshape(2, 3)
    splits = [j + 1 for j in range(n)]

    def run(x, gathered, exchanged, scattered):
        out = {
            "allreduce_sum": hvd.allreduce(x, op=hvd.Sum, process_set=ps),
            "allreduce_min": hvd.allreduce(x, op=hvd.Min, process_set=ps),
            "allreduce_max": ps.allreduce(x, op=hvd.Max),
            "allreduce_product": hvd.allreduce(x, op=hvd.Product, process_set=ps),
            "grouped_allreduce": hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, process_set=ps),
            "allgather": hvd.allgather(gathered, process_set=ps),
            "grouped_allgather": hvd.grouped_allgather([gathered, gathered + 1], process_set=ps),
            "broadcast": hvd.broadcast(x, root, process_set=ps),
            "alltoall": hvd.alltoall(exchanged, splits=splits, process_set=ps),
            "reducescatter": hvd.reducescatter(scattered, op=hvd.Sum, process_set=ps),
            "grouped_reducescatter": hvd.grouped_reducescatter([scattered, scattered], op=hvd.Sum, process_set=ps),
        }
        if floating:
            out["allreduce_average"] = hvd.allreduce(x, process_set=ps)
            out["allreduce_scaled"] = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                                                    process_set=ps)
            out["allreduce_fp16"] = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, process_set=ps)
            out["allreduce_indexed_slices"] = tf.convert_to_tensor(hvd.allreduce(
                tf.IndexedSlices(x[:1], tf.constant([me % 2]), tf.constant([2, 3])), op=hvd.Sum, process_set=ps))
        return out

    x = tf.constant(base + me, dtype=dtype)
    gathered = tf.fill([i + 1, 2], tf.constant(me, dtype=dtype))
    offsets = np.concatenate([[0], np.cumsum(splits)])
    exchanged = tf.constant((100 * me + np.arange(offsets[-1]))[:, None] * np.ones((1, 2)), dtype=dtype)
    rows = 2 * n + 1
    scattered = tf.constant(np.arange(rows * 2).reshape(rows, 2) + me, dtype=dtype)

    total = sum(base + r for r in ranks)
    expected = {
        "allreduce_sum": total,
        "allreduce_min": base + min(ranks),
        "allreduce_max": base + max(ranks),
        "allreduce_product": np.prod([base + r for r in ranks], axis=0),
        "grouped_allreduce": [total, 2 * total],
        "allgather": np.concatenate([np.full((j + 1, 2), r) for j, r in enumerate(ranks)]),
        "broadcast": base + root,
        "alltoall": (np.concatenate([(100 * r + np.arange(offsets[i], offsets[i + 1]))[:, None] * np.ones((1, 2))
                                     for r in ranks]), [i + 1] * n),
    }
    expected["grouped_allgather"] = [expected["allgather"], expected["allgather"] + 1]
    own = hvd.mpi_ops.reducescatter_rows
    start = sum(own(rows, n, j) for j in range(i))
    block = sum(np.arange(rows * 2).reshape(rows, 2) + r for r in ranks)[start:start + own(rows, n, i)]
    expected["reducescatter"] = block
    expected["grouped_reducescatter"] = [block, block]
    if floating:
        expected["allreduce_average"] = total / n
        expected["allreduce_scaled"] = total * 0.5
        expected["allreduce_fp16"] = total
        dense = np.zeros((2, 3))
        for r in ranks:
            dense[r % 2] += (base + r)[0]
        expected["allreduce_indexed_slices"] = dense
    return run, (x, gathered, exchanged, scattered), expected


def check_collectives(label, ps, ranks, dtype, mode):
    run, args, expected = ops_under_test(ps, ranks, dtype)
    results = in_mode(run, mode)(*args)
    for name, value in expected.items():
        def compare(name=name, value=value):
            result = results[name]
            if isinstance(value, tuple):  # alltoall: (output, received splits)
                equal(result[0], value[0])
                equal(result[1], value[1])
                assert result[1].dtype == tf.int32
                return
            for r, v in zip(result if isinstance(value, list) else [result], value if isinstance(value, list)
                            else [value]):
                assert r.dtype == dtype, (r.dtype, dtype)
                equal(r, v, 1e-2 if dtype == tf.float16 else 1e-6)

        report(name, label, dtype, mode, compare)


for label, ps in SETS.items():
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    if me not in ranks:
        continue
    for dtype in DTYPES:
        for mode in MODES:
            check_collectives(label, ps, ranks, dtype, mode)

import checks_more  # noqa: E402  (gradients, functions, errors: same SETS)

checks_more.run_all(SETS, report, equal, in_mode)
hvd.barrier()
print(f"collectives done failures={failures}", flush=True)
