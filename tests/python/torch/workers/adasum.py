"""Adasum on CPU: allreduce(op=hvd.Adasum) follows Horovod's rule on sets of
2 and 4 members, a set whose size is not a power of two is refused with a
ValueError, and DistributedOptimizer(op=hvd.Adasum) combines the members'
parameter updates after a local step (not their gradients), as Horovod's
delta optimizer does. Run on 4 ranks."""

import torch
import torch.nn.functional as F

import hora.torch as hvd
from checks import raises
from hora.errors import UnsupportedOperationError

hvd.init()
me = hvd.rank()
torch.set_num_threads(1)
pair = hvd.ProcessSet([1, 3])
trio = hvd.ProcessSet([0, 1, 2])


def adasum(a, b):
    """Horovod's combination of two vectors; a zero vector adds nothing."""
    dot, a_sq, b_sq = (a * b).sum(), (a * a).sum(), (b * b).sum()
    a_coeff = 1 - dot / (2 * a_sq) if a_sq > 0 else 1.0
    b_coeff = 1 - dot / (2 * b_sq) if b_sq > 0 else 1.0
    return a_coeff * a + b_coeff * b


def adasum_of(vectors):
    """The binary tree over members in set-rank order: (0+1) + (2+3)."""
    while len(vectors) > 1:
        vectors = [adasum(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def vector(r, dtype=torch.float64):
    return torch.tensor([[1.0 + r, 2.0 - r], [0.5 * r, 3.0]], dtype=dtype)


# The rule's two landmarks: equal vectors give that vector, orthogonal ones their sum.
x = torch.tensor([1.0, 2.0])
assert torch.allclose(adasum(x, x), x)
assert torch.allclose(adasum(x, torch.tensor([-2.0, 1.0])), torch.tensor([-1.0, 3.0]))

for ps in (hvd.global_process_set, pair):
    if not ps.included():
        continue
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    for dtype in (torch.float64, torch.float32):
        expected = adasum_of([vector(r, torch.float64) for r in ranks]).to(dtype)
        torch.testing.assert_close(hvd.allreduce(vector(me, dtype), op=hvd.Adasum, process_set=ps), expected)
        y = vector(me, dtype)
        hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Adasum, name=f"adasum.{dtype}", process_set=ps))
        torch.testing.assert_close(y, expected)
    # Grouped: each tensor gets its own coefficients.
    first, second = hvd.grouped_allreduce([vector(me), 3 * vector(me) + 1], op=hvd.Adasum, process_set=ps)
    torch.testing.assert_close(first, adasum_of([vector(r) for r in ranks]))
    torch.testing.assert_close(second, adasum_of([3 * vector(r) + 1 for r in ranks]))
print("adasum allreduce ok", flush=True)

if trio.included():
    raises(ValueError, lambda: hvd.allreduce(vector(me), op=hvd.Adasum, process_set=trio), "power of two")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum), "Adasum")
# As in Horovod, reducescatter refuses Adasum with a HorovodInternalError (here also a ValueError).
for error in (ValueError, hvd.HorovodInternalError, UnsupportedOperationError):
    raises(error, lambda: hvd.reducescatter(torch.ones(4), op=hvd.Adasum), "Sum and Average", "Adasum")
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), 4.0))  # the set still works


# DistributedOptimizer(op=Adasum) with plain SGD: each member steps on its own
# batch, and the parameters become the start plus the Adasum of the members'
# deltas (-lr * gradient), parameter by parameter. Outside the set: local steps.
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()


def batch(r, step):
    g = torch.Generator().manual_seed(10 * r + step)
    return torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64)


def gradients(model, r, step):
    model.zero_grad()
    x, y = batch(r, step)
    F.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


LR, STEPS = 0.1, 3
for ps in (hvd.global_process_set, pair):
    ranks = list(range(4)) if ps is hvd.global_process_set else ps.ranks
    model = make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters(), op=hvd.Adasum, process_set=ps)
    assert isinstance(optimizer, torch.optim.SGD)
    expected = make_model()
    for step in range(STEPS):
        optimizer.zero_grad()
        x, y = batch(me, step)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        members = ranks if ps.included() else [me]
        deltas = [[-LR * g for g in gradients(expected, r, step)] for r in members]
        with torch.no_grad():
            for i, p in enumerate(expected.parameters()):
                p += adasum_of([d[i] for d in deltas])
    for p, q in zip(model.parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, atol=1e-12, rtol=1e-9)
print("adasum optimizer ok", flush=True)

if trio.included():
    model = make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters(), op=hvd.Adasum, process_set=trio)

    def train_step():
        F.mse_loss(model(batch(me, 0)[0]), batch(me, 0)[1]).backward()
        optimizer.step()

    raises(ValueError, train_step, "power of two")
print("done", flush=True)
