"""Every collective on the global set and on [0,2], [1,3], [1,2,3] and [0],
with values checked. Run on 4 ranks."""

import numpy as np

import hora.numpy as hvd

hvd.init()
me = hvd.rank()
assert hvd.size() == 4

sets = {
    "global": hvd.global_process_set,
    "even": hvd.ProcessSet([0, 2]),
    "odd": hvd.ProcessSet(range(1, 4, 2)),
    "upper": hvd.ProcessSet(np.array([1, 2, 3])),
    "solo": hvd.ProcessSet([0]),
}

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]


def check_allreduce(ps, ranks):
    for dtype in DTYPES:
        x = (np.arange(6).reshape(2, 3) + me).astype(dtype)
        base = np.arange(6).reshape(2, 3)
        total = sum(base + r for r in ranks)
        np.testing.assert_array_equal(ps.allreduce(x, op=hvd.Sum), total.astype(dtype))
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Max, process_set=ps), (base + max(ranks)).astype(dtype))
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Min, process_set=ps), (base + min(ranks)).astype(dtype))
        prod = np.prod([base + r for r in ranks], axis=0)
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Product, process_set=ps), prod.astype(dtype))
        if np.issubdtype(dtype, np.floating):
            avg = hvd.allreduce(x, process_set=ps)  # Average is the default
            np.testing.assert_allclose(avg, total / len(ranks), rtol=1e-3)
            scaled = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, process_set=ps)
            np.testing.assert_allclose(scaled, total * 0.5, rtol=1e-3)
    grouped = hvd.grouped_allreduce([np.full(3, me, np.float32), np.full(5, 2 * me, np.float64)], op=hvd.Sum,
                                    process_set=ps)
    np.testing.assert_array_equal(grouped[0], np.full(3, sum(ranks), np.float32))
    np.testing.assert_array_equal(grouped[1], np.full(5, 2 * sum(ranks), np.float64))


def check_allgather(ps, ranks):
    x = np.full((me + 1, 2), me, dtype=np.int64)
    expected = np.concatenate([np.full((r + 1, 2), r, dtype=np.int64) for r in ranks])
    np.testing.assert_array_equal(ps.allgather(x), expected)
    a, b = hvd.grouped_allgather([x, x.astype(np.float32)], process_set=ps)
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(b, expected.astype(np.float32))


def check_broadcast(ps, ranks):
    for root in ranks:
        x = np.full(4, 10 * me, dtype=np.float32)
        np.testing.assert_array_equal(ps.broadcast(x, root), np.full(4, 10 * root, dtype=np.float32))


def check_alltoall(ps, ranks):
    n = len(ranks)
    my_index = ranks.index(me)
    # Send i+1 rows to member i, each row 100*me + i.
    x = np.concatenate([np.full((i + 1, 3), 100 * me + i, dtype=np.float32) for i in range(n)])
    out, received = ps.alltoall(x, splits=[i + 1 for i in range(n)])
    expected = np.concatenate([np.full((my_index + 1, 3), 100 * r + my_index, dtype=np.float32) for r in ranks])
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(received, [my_index + 1] * n)
    even, received = hvd.alltoall(np.arange(2 * n) + 10 * me, process_set=ps)
    np.testing.assert_array_equal(even, np.concatenate([[10 * r + 2 * my_index, 10 * r + 2 * my_index + 1]
                                                        for r in ranks]))
    np.testing.assert_array_equal(received, [2] * n)


def check_reducescatter(ps, ranks):
    n = len(ranks)
    my_index = ranks.index(me)
    rows = n + 1  # uneven unless n == 1
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + me
    total = sum(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + r for r in ranks)
    base, extra = divmod(rows, n)
    first = my_index * base + min(my_index, extra)
    count = base + (1 if my_index < extra else 0)
    np.testing.assert_array_equal(ps.reducescatter(x, op=hvd.Sum), total[first:first + count])
    np.testing.assert_allclose(hvd.reducescatter(x, process_set=ps), total[first:first + count] / n)
    a, b = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum, process_set=ps)
    np.testing.assert_array_equal(b, 2 * total[first:first + count])


for label, ps in sets.items():
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    if me not in ranks:
        continue
    for check in (check_allreduce, check_allgather, check_broadcast, check_alltoall, check_reducescatter):
        check(ps, ranks)
    ps.barrier()
    print(f"set {label} ok", flush=True)

hvd.barrier()
hvd.shutdown()
print("done", flush=True)
