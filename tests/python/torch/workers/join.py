"""join(): uneven numbers of batches on a process set and on the global set.
Run on 4 ranks."""

import torch
import torch.nn.functional as F

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
        # Ops other than allreduce fail while a rank has joined, naming it.
        raises(hvd.HorovodInternalError, lambda: hvd.allgather(a), "allgather", f"rank {first} called join()")
        raises(hvd.HorovodInternalError, lambda: hvd.broadcast(a, root_rank=me, name="bc"), "'bc'",
               f"rank {first} called join()")
    last = hvd.join()
    assert last != first, (last, first)
    assert hvd.allgather_object(last) == [last] * 4
print("global join ok", flush=True)


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
