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

# Every dtype NumPy has of those Horovod moves (NumPy has no bfloat16); bool
# is checked on its own.
DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


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


def check_allreduce_bool_and_in_place(ps, ranks):
    index = ranks.index(me)
    x = np.array([True, index == 0, False])
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), [True, True, False])  # or
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Min, process_set=ps), [True, len(ranks) == 1, False])
    y = np.full((2, 3), float(me))[:, ::2]  # not contiguous: written back
    assert hvd.allreduce_(y, op=hvd.Sum, process_set=ps) is y
    np.testing.assert_array_equal(y, np.full((2, 2), float(sum(ranks))))
    z = np.full(2, me)
    assert hvd.synchronize(hvd.broadcast_async_(z, ranks[-1], process_set=ps)) is z
    np.testing.assert_array_equal(z, [ranks[-1]] * 2)


def check_allgather(ps, ranks):
    for dtype in DTYPES + [np.bool_]:
        x = np.full((me + 1, 2), me, dtype=dtype)
        expected = np.concatenate([np.full((r + 1, 2), r, dtype=dtype) for r in ranks])
        gathered = ps.allgather(x)
        assert gathered.dtype == dtype, (gathered.dtype, dtype)
        np.testing.assert_array_equal(gathered, expected)
    x = np.full((me + 1, 2), me, dtype=np.int64)
    expected = np.concatenate([np.full((r + 1, 2), r, dtype=np.int64) for r in ranks])
    a, b = hvd.grouped_allgather([x, x.astype(np.float32)], process_set=ps)
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(b, expected.astype(np.float32))


def check_broadcast(ps, ranks):
    for dtype in DTYPES + [np.bool_]:
        for root in ranks:
            x = np.full(4, 10 * me, dtype=dtype)
            result = ps.broadcast(x, root)
            assert result.dtype == dtype
            np.testing.assert_array_equal(result, np.full(4, 10 * root, dtype=dtype))
            np.testing.assert_array_equal(x, np.full(4, 10 * me, dtype=dtype))  # untouched


def check_alltoall(ps, ranks):
    n = len(ranks)
    my_index = ranks.index(me)
    for dtype in DTYPES + [np.bool_]:
        # Send i+1 rows to member i, each row 10*me + i.
        x = np.concatenate([np.full((i + 1, 3), 10 * me + i, dtype=dtype) for i in range(n)])
        out, received = ps.alltoall(x, splits=[i + 1 for i in range(n)])
        expected = np.concatenate([np.full((my_index + 1, 3), 10 * r + my_index, dtype=dtype) for r in ranks])
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(received, [my_index + 1] * n)
    even, received = hvd.alltoall(np.arange(2 * n) + 10 * me, splits=np.full(n, 2), process_set=ps)
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
    for check in (check_allreduce, check_allreduce_bool_and_in_place, check_allgather, check_broadcast,
                  check_alltoall, check_reducescatter):
        check(ps, ranks)
    ps.barrier()
    print(f"set {label} ok", flush=True)

hvd.barrier()
hvd.shutdown()
print("done", flush=True)
