"""join(): uneven numbers of batches on a process set and on the global set;
allgather and broadcast fail (as in Horovod) while a member has joined; join
twice in a row; hora.numpy's join. Run on 4 ranks."""

import numpy as np
import torch
import torch.nn.functional as F

import hora.numpy as hnp
import hora.torch as hvd
from checks import raises

hvd.init()
me = hvd.rank()
torch.set_num_threads(1)
trio = hvd.ProcessSet([1, 2, 3])




# Horovod's join test on the global set: the joined rank contributes zeros,
# Average still divides by the set's size, and every rank gets the same
# last-joined rank, which is not the first one to join.
for first in range(4):
    a = torch.arange(5, dtype=torch.float64) - 2
    b = torch.arange(4, dtype=torch.int64) * 3
    if me != first:
        averaged = hvd.allreduce(a, name="a")
        summed = hvd.synchronize(hvd.allreduce_async(b, name="b", op=hvd.Sum))
        grouped = hvd.grouped_allreduce([a, a], name="g", op=hvd.Sum)
        unnamed = hvd.allreduce(a, op=hvd.Sum)
        assert torch.equal(averaged, a * 3 / 4), averaged
        assert torch.equal(summed, b * 3) and torch.equal(grouped[1], a * 3) and torch.equal(unnamed, a * 3)
        # As in Horovod, allgather and broadcast fail while a rank has joined
        # (with an error naming it), and the set keeps working.
        message = raises(hvd.HorovodInternalError, lambda: hvd.allgather(a, name="ag"), "'ag'", "called join()")
        assert str(first) in message.split("called join()")[0], message
        raises(hvd.HorovodInternalError, lambda: hvd.broadcast(a, root_rank=me, name="bc"), "'bc'", "called join()")
        assert torch.equal(hvd.allreduce(b, op=hvd.Max, name="after"), b)
    last = hvd.join()
    assert last != first, (last, first)
    assert hvd.allgather_object(last) == [last] * 4
print("global join ok", flush=True)

# Uneven batches: rank r has r + 1 batches. At step k the ranks with more than
# k batches contribute their value and the joined ones zeros; Sum adds the
# active values, Average divides them by the set's size.
for step in range(me + 1):
    value = torch.full((2,), float(10 * me + step), dtype=torch.float64)
    active = [r for r in range(4) if step < r + 1]
    total = float(sum(10 * r + step for r in active))
    assert torch.equal(hvd.allreduce(value, op=hvd.Sum, name="uneven.sum"), torch.full((2,), total,
                                                                                      dtype=torch.float64))
    handle = hvd.allreduce_async(value, op=hvd.Average, name="uneven.average")
    assert torch.equal(hvd.synchronize(handle), torch.full((2,), total / 4, dtype=torch.float64))
assert hvd.join() == 3
print("uneven batches ok", flush=True)

# Joining twice in a row: each join ends when every member has joined again.
firsts = [hvd.join(), hvd.join()]
assert hvd.allgather_object(firsts) == [firsts] * 4, firsts
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), 4.0))
print("join twice ok", flush=True)

# hora.numpy's join: the same op.
if me == 0:
    assert hnp.join() != 0
else:
    np.testing.assert_array_equal(hnp.allreduce(np.full(3, me), op=hnp.Sum, name="numpy.uneven"), [6, 6, 6])
    hnp.join()
print("numpy join ok", flush=True)


# Uneven batches with DistributedOptimizer on the set [1, 2, 3]: member r has r
# batches. At step k the members with more than k batches contribute their
# gradient, the joined ones zeros, and Average divides by 3.
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()


def batches(r):
    g = torch.Generator().manual_seed(r)
    return [(torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 1, generator=g, dtype=torch.float64))
            for _ in range(r)]


if trio.included():
    model = make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), process_set=trio)
    for x, y in batches(me):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    last = hvd.join(process_set=trio)
    assert last == 3
    # The members that joined early skipped the last steps: as in Horovod, take
    # the model of the member that joined last.
    hvd.broadcast_parameters(model.state_dict(), root_rank=last, process_set=trio)

    expected = make_model()
    data = {r: batches(r) for r in trio.ranks}
    for step in range(max(len(d) for d in data.values())):
        grads = [torch.zeros_like(p) for p in expected.parameters()]
        for r, d in data.items():
            if step < len(d):
                expected.zero_grad()
                F.mse_loss(expected(d[step][0]), d[step][1]).backward()
                grads = [g + p.grad for g, p in zip(grads, expected.parameters())]
        with torch.no_grad():
            for p, g in zip(expected.parameters(), grads):
                p -= 0.1 * g / 3
    for p, q in zip(model.parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0)
    # The set works as before once everyone has joined.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=trio), torch.full((2,), 3.0))
else:
    raises(ValueError, lambda: hvd.join(process_set=trio), "not a member")
print("set join ok", flush=True)
print("done", flush=True)
