"""Every hora.torch collective, in its plain, async, in-place and grouped forms,
on the global set and on [0,2], [1,3], [1,2,3], with values checked. 4 ranks."""

import warnings

import torch

import hora.torch as hvd
from hora.errors import HorovodInternalError
from checks import raises

hvd.init()
me = hvd.rank()
assert hvd.size() == 4 and hvd.is_initialized()

SETS = {
    "global": hvd.global_process_set,
    "even": hvd.ProcessSet([0, 2]),
    "odd": hvd.ProcessSet([1, 3]),
    "upper": hvd.add_process_set(hvd.ProcessSet([1, 2, 3])),
}
# Every dtype Horovod moves except bool (checked on its own: its Sum is "or").
DTYPES = [torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def equal(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"


def close(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    tolerance = 1e-2 if actual.dtype == torch.bfloat16 else 1e-3
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)




def check_allreduce(ps, ranks):
    base = torch.arange(6).reshape(2, 3)
    for dtype in DTYPES:
        x = (base + me).to(dtype)
        total = sum(base + r for r in ranks).to(dtype)  # wraps around for 8-bit types, as the core does
        equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total)
        equal(ps.allreduce(x, op=hvd.Max), (base + max(ranks)).to(dtype))
        equal(hvd.allreduce(x, op=hvd.Min, process_set=ps), (base + min(ranks)).to(dtype))
        product = torch.prod(torch.stack([base + r for r in ranks]), 0).to(dtype)
        equal(hvd.allreduce(x, op=hvd.Product, process_set=ps), product)
        equal(x, (base + me).to(dtype))  # the input is untouched
        if dtype in FLOATS:
            average = (sum(base + r for r in ranks).double() / len(ranks)).to(dtype)
            close(hvd.allreduce(x, process_set=ps), average)  # Average is the default
            close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, process_set=ps),
                  (sum(base + r for r in ranks).double() * 0.5).to(dtype))
        # Async, and in place: the result lands in the tensor's own memory.
        handle = hvd.allreduce_async(x, op=hvd.Sum, name=f"async.{dtype}", process_set=ps)
        equal(hvd.synchronize(handle), total)
        assert hvd.poll(handle)
        y = x.clone()
        pointer = y.data_ptr()
        result = hvd.allreduce_(y, op=hvd.Sum, process_set=ps)
        assert result is y and y.data_ptr() == pointer
        equal(y, total)
        y = x.clone()
        equal(hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum, process_set=ps)), total)
        equal(y, total)
    # Grouped, mixed dtypes; in-place grouped.
    a, b = torch.full((3,), float(me)), torch.full((5,), 2 * me, dtype=torch.int64)
    ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="grouped", process_set=ps)
    equal(ra, torch.full((3,), float(sum(ranks))))
    equal(rb, torch.full((5,), 2 * sum(ranks), dtype=torch.int64))
    ra, rb = hvd.synchronize(hvd.grouped_allreduce_async([a, b], op=hvd.Max, process_set=ps))
    equal(rb, torch.full((5,), 2 * max(ranks), dtype=torch.int64))
    out = hvd.grouped_allreduce_([a, b], op=hvd.Sum, process_set=ps)
    assert out[0] is a and out[1] is b
    equal(a, torch.full((3,), float(sum(ranks))))
    c = torch.full((2,), float(me), dtype=torch.float64)
    hvd.synchronize(hvd.grouped_allreduce_async_([c], op=hvd.Sum, process_set=ps))
    equal(c, torch.full((2,), float(sum(ranks)), dtype=torch.float64))
    # Non-contiguous inputs, in and out of place; bfloat16; fp16 compression.
    m = (torch.arange(12.0).reshape(3, 4) + me).t()
    expected = sum(torch.arange(12.0).reshape(3, 4) + r for r in ranks).t()
    equal(hvd.allreduce(m, op=hvd.Sum, process_set=ps), expected)
    hvd.allreduce_(m, op=hvd.Sum, process_set=ps)
    equal(m, expected)
    bf = torch.full((4,), float(me), dtype=torch.bfloat16)
    equal(hvd.allreduce(bf, op=hvd.Sum, process_set=ps), torch.full((4,), float(sum(ranks)), dtype=torch.bfloat16))
    compressed = hvd.allreduce(torch.full((3,), float(me), dtype=torch.float64), op=hvd.Sum,
                               compression=hvd.Compression.fp16, process_set=ps)
    equal(compressed, torch.full((3,), float(sum(ranks)), dtype=torch.float64))


def check_allreduce_bool(ps, ranks):
    """bool: Sum and Max are "or", Min and Product "and"; no scaling."""
    index = ranks.index(me)
    x = torch.tensor([True, index == 0, False, index % 2 == 1])
    anyone = torch.tensor([True, True, False, len(ranks) > 1])
    everyone = torch.tensor([True, len(ranks) == 1, False, False])
    for op, expected in ((hvd.Sum, anyone), (hvd.Max, anyone), (hvd.Min, everyone), (hvd.Product, everyone)):
        equal(hvd.allreduce(x, op=op, process_set=ps), expected)
    y = x.clone()
    equal(hvd.allreduce_(y, op=hvd.Sum, process_set=ps), anyone)


def check_allgather(ps, ranks):
    for dtype in DTYPES + [torch.bool]:
        x = torch.full((me + 1, 2), me, dtype=dtype)
        expected = torch.cat([torch.full((r + 1, 2), r, dtype=dtype) for r in ranks])
        equal(hvd.allgather(x, process_set=ps), expected)
        equal(hvd.synchronize(hvd.allgather_async(x, name=f"gather.{dtype}", process_set=ps)), expected)
    x = torch.full((me + 1, 2), me)
    expected = torch.cat([torch.full((r + 1, 2), r) for r in ranks])
    equal(ps.allgather(x), expected)
    a, b = hvd.grouped_allgather([x, x.double()], process_set=ps)
    equal(a, expected)
    equal(b, expected.double())
    a, b = hvd.synchronize(hvd.grouped_allgather_async([x, x.t().contiguous().t()], process_set=ps))
    equal(b, expected)


def check_broadcast(ps, ranks):
    for dtype in DTYPES + [torch.bool]:
        for root in ranks:
            x = torch.full((2, 2), 10 * me, dtype=dtype)
            expected = torch.full((2, 2), 10 * root, dtype=dtype)
            equal(hvd.broadcast(x, root, process_set=ps), expected)
            equal(x, torch.full((2, 2), 10 * me, dtype=dtype))
        root = ranks[-1]
        equal(hvd.synchronize(hvd.broadcast_async(x, root, process_set=ps)), torch.full((2, 2), 10 * root, dtype=dtype))
        y = x.clone()
        assert hvd.broadcast_(y, root, process_set=ps) is y
        equal(y, torch.full((2, 2), 10 * root, dtype=dtype))
        y = x.clone()
        hvd.synchronize(hvd.broadcast_async_(y, ranks[0], process_set=ps))
        equal(y, torch.full((2, 2), 10 * ranks[0], dtype=dtype))
    equal(ps.broadcast(torch.tensor([float(me)]), ranks[0]), torch.tensor([float(ranks[0])]))


def check_alltoall(ps, ranks):
    n, index = len(ranks), ranks.index(me)
    for dtype in DTYPES + [torch.bool]:
        # Send i+1 rows to member i, each row 10*me + i.
        x = torch.cat([torch.full((i + 1, 3), 10 * me + i, dtype=dtype) for i in range(n)])
        expected = torch.cat([torch.full((index + 1, 3), 10 * r + index, dtype=dtype) for r in ranks])
        out, received = hvd.alltoall(x, splits=[i + 1 for i in range(n)], process_set=ps)
        equal(out, expected)
        equal(received, torch.full((n,), index + 1, dtype=torch.int32))  # sized by the set
        out, received = hvd.alltoall(x, splits=torch.arange(1, n + 1, dtype=torch.int64), process_set=ps)
        equal(received, torch.full((n,), index + 1, dtype=torch.int64))
    even = torch.arange(2 * n) + 10 * me
    expected = torch.cat([torch.tensor([10 * r + 2 * index, 10 * r + 2 * index + 1]) for r in ranks])
    equal(hvd.alltoall(even, process_set=ps), expected)  # no splits: the output alone, as in Horovod
    out, received = hvd.synchronize(hvd.alltoall_async(even, process_set=ps))
    equal(out, expected)
    equal(received, torch.full((n,), 2, dtype=torch.int32))
    out, received = ps.alltoall(even, splits=[2] * n)
    equal(out, expected)


def check_reducescatter(ps, ranks):
    n, index = len(ranks), ranks.index(me)
    rows = n + 1  # uneven unless n == 1
    base = torch.arange(rows * 2).reshape(rows, 2)
    size, extra = divmod(rows, n)
    first, count = index * size + min(index, extra), size + (1 if index < extra else 0)
    for dtype in DTYPES:
        x = (base + me).to(dtype)
        total = sum(base + r for r in ranks).to(dtype)[first:first + count]
        equal(hvd.reducescatter(x, op=hvd.Sum, process_set=ps), total)
        if dtype in FLOATS:
            close(hvd.reducescatter(x, process_set=ps), total / n)  # Average is the default
            close(hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, process_set=ps),
                  total * 2)
        equal(hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum, process_set=ps)), total)
    x = (base + me).float()
    total = sum(base + r for r in ranks).float()[first:first + count]
    a, b = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum, process_set=ps)
    equal(a, total)
    equal(b, 2 * total)
    a, b = hvd.synchronize(hvd.grouped_reducescatter_async([x, x], op=hvd.Sum, process_set=ps))
    equal(b, total)
    equal(ps.reducescatter(x, op=hvd.Sum), total)


def check_sparse(ps, ranks):
    def dense_of(r):
        dense = torch.zeros(4, 3)
        dense[r] = float(r + 1)
        dense[0, 0] += 1.0  # an index every member has
        return dense

    dense = dense_of(me)
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Sum, process_set=ps)
    result = hvd.synchronize(handle)
    assert result.is_sparse
    expected = sum(dense_of(r) for r in ranks)
    equal(result.to_dense(), expected)
    average = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse.avg", op=hvd.Average, process_set=ps)()
    close(average.to_dense(), expected / len(ranks))


for label, ps in SETS.items():
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    if me not in ranks:
        raises(ValueError, lambda: hvd.allreduce(torch.ones(2), process_set=ps), "not a member")
        continue
    for check in (check_allreduce, check_allreduce_bool, check_allgather, check_broadcast, check_alltoall,
                  check_reducescatter, check_sparse):
        check(ps, ranks)
    hvd.barrier(process_set=ps)
    print(f"set {label} ok", flush=True)

# Horovod's rules and errors.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    equal(hvd.allreduce(torch.ones(2), average=False), torch.full((2,), 4.0))
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum), "supersedes")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)), "complex64")
raises(ValueError, lambda: hvd.broadcast(torch.ones(2), root_rank=7), "root rank 7")
raises(ValueError, lambda: hvd.alltoall(torch.ones(5)), "does not divide")
# Horovod raises a HorovodInternalError here; hora's error is also a ValueError.
raises(ValueError, lambda: hvd.reducescatter(torch.ones(4), op=hvd.Max), "Sum and Average")
raises(HorovodInternalError, lambda: hvd.reducescatter(torch.ones(4), op=hvd.Product), "Sum and Average")
assert issubclass(hvd.HorovodInternalError, RuntimeError) and hvd.HorovodInternalError is HorovodInternalError
assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
assert hvd.gloo_built() and hvd.gloo_enabled() != hvd.mpi_enabled() and not hvd.nccl_built()
assert hvd.local_size() == 4 and hvd.local_rank() == me and hvd.cross_size() == 1 and hvd.cross_rank() == 0

# Mismatched shapes surface as a MismatchError, a HorovodInternalError.
shape = 3 if me == 1 else 2
raises(HorovodInternalError, lambda: hvd.allreduce(torch.ones(shape), name="bad"), "'bad'", "shape")
# Unnamed ops get "<op>.noname.<n>": a mismatch on one names it.
raises(HorovodInternalError, lambda: hvd.allgather(torch.ones(1, 1 + (me == 2))), "allgather.noname.")

# Removing a set, then using it, is refused.
upper = SETS["upper"]
if upper.included():
    set_id = upper.process_set_id
    assert hvd.remove_process_set(upper)
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=upper), f"process set {set_id} has been removed")

# A valid, empty timeline.
hvd.start_timeline("/tmp/hora_torch_timeline.json")
hvd.stop_timeline()
print("done", flush=True)
