"""Every hora.mxnet collective on the global set and on [0,2] and [1,2,3],
for float32/float64/int32, with values, dtypes and contexts checked; then
objects, mismatched shapes and bad input. Run on 4 ranks; prints one line
per check:

    ok <check> <set> <dtype>        (or FAIL ... and the error)
"""

import sys
import traceback

import mxnet as mx
import numpy as np

import hora.mxnet as hvd
from hora.errors import MismatchError

hvd.init()
me = hvd.rank()
assert hvd.size() == 4

SETS = {
    "global": hvd.global_process_set,
    "even": hvd.ProcessSet([0, 2]),  # registered on first use
    "upper": hvd.add_process_set(hvd.ProcessSet([1, 2, 3])),
}
DTYPES = ("float32", "float64", "int32")
failures = 0


def say(line):
    """One write per line: mpirun tags output by the chunk, not by the line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def report(check, label, dtype, fn):
    """Runs ``fn`` (which asserts) and prints its outcome."""
    global failures
    where = f"{check} {label} {dtype}"
    try:
        fn()
        say(f"ok {where}")
    except Exception:
        failures += 1
        say(f"FAIL {where}\n{traceback.format_exc()}")


def raises(kind, fn, text):
    try:
        fn()
    except kind as error:
        assert text in str(error), f"{text!r} not in {str(error)!r}"
        return error
    raise AssertionError(f"no {kind.__name__} raised")


def raises_kinds(fn, text, *kinds):
    """``fn`` raises one error that is an instance of each of ``kinds``."""
    error = raises(kinds[0], fn, text)
    for kind in kinds[1:]:
        assert isinstance(error, kind), f"{type(error).__mro__} is no {kind.__name__}"


def equal(result, expected, dtype):
    """``result`` is a new NDArray of ``dtype`` on the CPU holding ``expected``."""
    assert isinstance(result, mx.nd.NDArray), type(result)
    assert np.dtype(result.dtype) == np.dtype(dtype), (result.dtype, dtype)
    assert result.context == mx.cpu(), result.context
    actual, expected = result.asnumpy(), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.allclose(actual.astype(np.float64), expected.astype(np.float64), atol=1e-6, rtol=0), \
        f"\n{actual}\n!=\n{expected}"


def ops_under_test(ps, ranks, dtype):
    """name -> (function giving the result, expected value) for one set and dtype."""
    i, n, root = ranks.index(me), len(ranks), ranks[-1]
    base = np.arange(6).reshape(2, 3)

    def nd(values):
        return mx.nd.array(np.asarray(values), dtype=dtype)

    total = sum(base + r for r in ranks)
    splits = [j + 1 for j in range(n)]
    offsets = np.concatenate([[0], np.cumsum(splits)])
    exchanged = (100 * me + np.arange(offsets[-1]))[:, None] * np.ones((1, 2))
    received = np.concatenate([(100 * r + np.arange(offsets[i], offsets[i + 1]))[:, None] * np.ones((1, 2))
                               for r in ranks])
    even = (10 * me + np.arange(2 * n))[:, None] * np.ones((1, 2))
    even_received = np.concatenate([(10 * r + np.arange(2 * i, 2 * i + 2))[:, None] * np.ones((1, 2))
                                    for r in ranks])
    gathered = np.concatenate([np.full((j + 1, 2), r) for j, r in enumerate(ranks)])
    rows = 2 * n + 1
    own = hvd.mpi_ops.reducescatter_rows
    start = sum(own(rows, n, j) for j in range(i))
    block = sum(np.arange(rows * 2).reshape(rows, 2) + r for r in ranks)[start:start + own(rows, n, i)]
    scattered = np.arange(rows * 2).reshape(rows, 2) + me
    x = base + me

    def in_place(fn, values):
        tensor = nd(values)
        result = fn(tensor)
        assert result is tensor, "the in-place form returns the NDArray it was given"
        return tensor

    ops = {
        "allreduce_sum": (lambda: hvd.allreduce(nd(x), op=hvd.Sum, process_set=ps), total),
        "allreduce_min": (lambda: hvd.allreduce(nd(x), op=hvd.Min, process_set=ps), base + min(ranks)),
        "allreduce_max": (lambda: ps.allreduce(nd(x), op=hvd.Max), base + max(ranks)),
        "allreduce_product": (lambda: hvd.allreduce(nd(x), op=hvd.Product, process_set=ps),
                              np.prod([base + r for r in ranks], axis=0)),
        "allreduce_": (lambda: in_place(lambda t: hvd.allreduce_(t, op=hvd.Sum, process_set=ps), x), total),
        "grouped_allreduce": (lambda: hvd.grouped_allreduce([nd(x), nd(2 * x)], op=hvd.Sum, process_set=ps),
                              [total, 2 * total]),
        "grouped_allreduce_": (lambda: hvd.grouped_allreduce_([nd(x), nd(2 * x)], op=hvd.Sum, process_set=ps),
                               [total, 2 * total]),
        "allgather": (lambda: hvd.allgather(nd(np.full((i + 1, 2), me)), process_set=ps), gathered),
        "grouped_allgather": (lambda: hvd.grouped_allgather([nd(np.full((i + 1, 2), me))] * 2, process_set=ps),
                              [gathered, gathered]),
        "broadcast": (lambda: hvd.broadcast(nd(x), root, process_set=ps), base + root),
        "broadcast_": (lambda: in_place(lambda t: hvd.broadcast_(t, root, process_set=ps), x), base + root),
        "alltoall": (lambda: hvd.alltoall(nd(exchanged), splits=splits, process_set=ps), (received, [i + 1] * n)),
        "alltoall_even": (lambda: hvd.alltoall(nd(even), process_set=ps), even_received),
        "reducescatter": (lambda: hvd.reducescatter(nd(scattered), op=hvd.Sum, process_set=ps), block),
        "grouped_reducescatter": (lambda: hvd.grouped_reducescatter([nd(scattered)] * 2, op=hvd.Sum,
                                                                    process_set=ps), [block, block]),
    }
    if dtype != "int32":
        ops["allreduce_average"] = (lambda: hvd.allreduce(nd(x), process_set=ps), total / n)
        ops["allreduce_scaled"] = (lambda: hvd.allreduce(nd(x), op=hvd.Sum, prescale_factor=2.0,
                                                         postscale_factor=0.25, process_set=ps), total * 0.5)
    return ops


def check_collectives(label, ps, ranks, dtype):
    for name, (run, expected) in ops_under_test(ps, ranks, dtype).items():
        def compare(run=run, expected=expected):
            result = run()
            if isinstance(expected, tuple):  # alltoall with splits: (output, received splits)
                equal(result[0], expected[0], dtype)
                equal(result[1], expected[1], "int32")
            elif isinstance(expected, list):
                assert len(result) == len(expected)
                for r, e in zip(result, expected):
                    equal(r, e, dtype)
            else:
                equal(result, expected, dtype)

        report(name, label, dtype, compare)


def check_functions_and_mismatches(label, ps, ranks):
    i, root = ranks.index(me), ranks[-1]
    report("broadcast_object", label, "-", lambda: raises_nothing(
        hvd.broadcast_object({"from": me, "f": lambda v: v + 1}, root, process_set=ps), root))
    report("allgather_object", label, "-", lambda: assert_equal(
        hvd.allgather_object(("rank", me), process_set=ps), [("rank", r) for r in ranks]))
    report("mismatch_shape", label, "-", lambda: raises(
        MismatchError, lambda: hvd.allreduce(mx.nd.ones((2 + i,)), process_set=ps), "shape"))
    report("after_mismatch", label, "-", lambda: equal(
        hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, process_set=ps), [len(ranks)] * 2, "float32"))


def raises_nothing(obj, root):
    assert obj["from"] == root and obj["f"](1) == 2, obj


def assert_equal(actual, expected):
    assert actual == expected, (actual, expected)


def check_bad_input():
    x = mx.nd.ones((4, 2))
    outsiders = hvd.ProcessSet([r for r in range(4) if r != me])
    readonly = mx.nd.ones((2,))
    cases = {
        "list": (lambda: hvd.allreduce([1.0, 2.0]), "must be an mxnet NDArray, got list"),
        "numpy": (lambda: hvd.broadcast(np.ones(2), 0), "must be an mxnet NDArray, got ndarray"),
        "sparse": (lambda: hvd.allreduce(x.tostype("csr")), "csr NDArray"),
        "op": (lambda: hvd.allreduce(x, op="sum"), "unknown reduction op"),
        "root_type": (lambda: hvd.broadcast(x, root_rank="0"), "root_rank must be an integer"),
        "root_range": (lambda: hvd.broadcast(x, root_rank=7), "root"),
        "process_set": (lambda: hvd.allgather(x, process_set="odd"), "process_set must be a ProcessSet"),
        "non_member": (lambda: hvd.allreduce(x, process_set=outsiders), "not a member"),
        "reducescatter_op": (lambda: hvd.reducescatter(x, op=hvd.Min), "Sum and Average"),
        # The alltoall errors are horovod.mxnet's MXNetError too.
        "splits_values": (lambda: hvd.alltoall(x, splits=[1, 1, 1, 9]), "split", mx.base.MXNetError),
        "splits_sum": (lambda: hvd.alltoall(x, splits=mx.nd.ones((4,), dtype="int32") * 2), "add up to",
                       mx.base.MXNetError),
        "splits_dtype": (lambda: hvd.alltoall(x, splits=mx.nd.ones((4,))), "splits must hold integers",
                         mx.base.MXNetError),
        "splits_even": (lambda: hvd.alltoall(mx.nd.ones((5, 2))), "divide", mx.base.MXNetError),
        "grouped_single": (lambda: hvd.grouped_allreduce(x), "needs a list"),
        "grouped_entry": (lambda: hvd.grouped_allgather([x, "y"]), "tensor 1 must be an mxnet NDArray"),
        "params": (lambda: hvd.broadcast_parameters([x]), "dict or ParameterDict"),
        "prefix": (lambda: hvd.broadcast_parameters({"x": x}, prefix=3), "prefix must be a string"),
        "optimizer": (lambda: hvd.DistributedOptimizer("sgd"), "mx.optimizer.Optimizer"),
        "predivide": (lambda: hvd.DistributedOptimizer(mx.optimizer.SGD(), gradient_predivide_factor=0),
                      "gradient_predivide_factor"),
    }
    if hasattr(readonly, "writable"):
        readonly.writable = False
        cases["read_only"] = (lambda: hvd.allreduce_(readonly), "read-only")
    for name, (fn, text, *also) in cases.items():
        report(f"bad_input_{name}", "global", "-", lambda fn=fn, text=text, also=also: raises_kinds(
            fn, text, ValueError, *also))


for label, ps in SETS.items():
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    if me not in ranks:
        continue
    for dtype in DTYPES:
        check_collectives(label, ps, ranks, dtype)
    check_functions_and_mismatches(label, ps, ranks)
check_bad_input()
hvd.barrier()
print(f"collectives done failures={failures}", flush=True)
