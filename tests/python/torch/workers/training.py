"""DistributedOptimizer on process sets: a set of 2 ranks, each with half of a
batch, ends with the parameters one process reaches on the whole batch (also
with backward_passes_per_step=2, groups, predivision, compression, op=Sum,
sparse gradients, and gradient buckets of any size); ranks outside the set train locally; two tasks on disjoint
sets train concurrently to the parameters they reach alone. Run on 4 ranks."""

import copy
import os

import torch
import torch.nn.functional as F

import hora.torch as hvd

hvd.init()
me = hvd.rank()
torch.set_num_threads(1)
even = hvd.ProcessSet([0, 2])
odd = hvd.ProcessSet([1, 3])
upper = hvd.ProcessSet([1, 2, 3])
STEPS = 6


def make_model(seed, hidden=8):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2)).double()


def batch(seed, rows):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 5, generator=g, dtype=torch.float64), torch.randn(rows, 2, generator=g,
                                                                              dtype=torch.float64)


def train(model, optimizer, x, y, passes=1, steps=STEPS):
    """``steps`` steps; each accumulates ``passes`` backward passes over equal
    slices of (x, y), with the loss scaled by 1/passes."""
    for _ in range(steps):
        optimizer.zero_grad()
        for xs, ys in zip(x.chunk(passes), y.chunk(passes)):
            (F.mse_loss(model(xs), ys) / passes).backward()
        optimizer.step()
    return model


def reference(seed, x, y, lr=0.1, steps=STEPS, **options):
    """One process training on the whole batch."""
    model = make_model(seed, **options)
    return train(model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), x, y, steps=steps)


def distributed(seed, ps, x, y, lr=0.1, passes=1, options=None, **kwargs):
    model = make_model(seed)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                         named_parameters=model.named_parameters(), process_set=ps,
                                         backward_passes_per_step=passes, **kwargs)
    assert isinstance(optimizer, torch.optim.SGD)
    return train(model, optimizer, x, y, passes)


def assert_same(model, expected, atol=1e-5):
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, atol=atol, rtol=0, msg=name)


def my_share(x, y, ps):
    """This member's equal share of a batch split over the set."""
    n, i = ps.size(), ps.rank()
    return x.chunk(n)[i], y.chunk(n)[i]


# Equivalence on a set of 2, with 1 and 2 backward passes per step; odd ranks train locally.
x, y = batch(7, 16)
full = reference(1, x, y)
for passes in (1, 2):
    if even.included():
        assert_same(distributed(1, even, *my_share(x, y, even), passes=passes), full)
    else:
        local_x, local_y = batch(100 + me, 8)
        model = distributed(1, even, local_x, local_y, passes=passes)  # not a member: local steps
        plain = make_model(1)
        train(plain, torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9), local_x, local_y, passes)
        assert_same(model, plain, atol=0)
print("equivalence ok", flush=True)

# Options that must not change the result, on the set [1, 2, 3] (rank 0 outside it):
# groups (ordered from the set's own first rank), predivision, op=Sum with a scaled rate.
x, y = batch(8, 12)
full = reference(2, x, y)
if upper.included():
    model = make_model(2)
    named = list(model.named_parameters())
    variants = [dict(groups=2), dict(groups=[[named[0][1], named[3][1]]]), dict(num_groups=1),
                dict(gradient_predivide_factor=2.0), dict(op=hvd.Sum, lr=0.1 / 3)]
    for kwargs in variants:
        assert_same(distributed(2, upper, *my_share(x, y, upper), **kwargs), full)
    assert_same(distributed(2, upper, *my_share(x, y, upper), compression=hvd.Compression.fp16), full, atol=2e-3)
print("options ok", flush=True)

# Sparse embedding gradients, as sparse allgathers and as dense allreduces.
if even.included():
    def embedding_model(sparse):
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Embedding(10, 3, sparse=sparse), torch.nn.Flatten(),
                                   torch.nn.Linear(6, 1)).double()

    tokens = torch.randint(0, 10, (8, 2), generator=torch.Generator().manual_seed(4))
    targets = torch.randn(8, 1, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    expected = embedding_model(False)
    train(expected, torch.optim.SGD(expected.parameters(), lr=0.1), tokens, targets)
    for sparse_as_dense in (False, True):
        model = embedding_model(True)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(), process_set=even,
                                             sparse_as_dense=sparse_as_dense)
        train(model, optimizer, *my_share(tokens, targets, even))
        assert_same(model, expected)
print("sparse ok", flush=True)

# Gradient buckets (hora/torch/buckets.py): one allreduce per parameter
# (HORA_TORCH_BUCKET_MB=0), buckets of a few parameters, gradients that
# arrive in another order on each member, a parameter without a gradient in
# some steps, zero_grad(set_to_none=False): each as one process on the whole
# batch. Plain SGD: a missing gradient is zeros here and skipped there.
class TwoBranches(torch.nn.Module):
    def __init__(self, seed, flip):
        super().__init__()
        torch.manual_seed(seed)
        self.a, self.b, self.rare = (torch.nn.Linear(5, 2).double() for _ in range(3))
        self.flip, self.use_rare = flip, False

    def forward(self, x):
        # Autograd runs the branch made last first: members that flip get
        # their gradients in the other order.
        out = self.b(x) + self.a(x) if self.flip else self.a(x) + self.b(x)
        return out + self.rare(x) if self.use_rare else out


def bucketed(ps, x, y, bucket_mb, flip, set_to_none=True, passes=1):
    # A pair: each member its own setting (the first member's applies).
    os.environ["HORA_TORCH_BUCKET_MB"] = bucket_mb if isinstance(bucket_mb, str) else bucket_mb[ps.rank()]
    try:
        model = TwoBranches(9, flip)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(), process_set=ps,
                                             backward_passes_per_step=passes)
    finally:
        del os.environ["HORA_TORCH_BUCKET_MB"]
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=set_to_none)
        model.use_rare = step % 3 == 2
        for xs, ys in zip(x.chunk(passes), y.chunk(passes)):
            (F.mse_loss(model(xs), ys) / passes).backward()
        optimizer.step()
    return model


x, y = batch(11, 16)
whole = TwoBranches(9, False)
plain_sgd = torch.optim.SGD(whole.parameters(), lr=0.1)
for step in range(STEPS):
    plain_sgd.zero_grad()
    whole.use_rare = step % 3 == 2
    F.mse_loss(whole(x), y).backward()
    plain_sgd.step()
if even.included():
    flip = even.rank() == 1
    for bucket_mb, set_to_none, passes in (("0", True, 1), ("0.0002", True, 1), ("25", True, 1),
                                           ("25", False, 1), ("0.0002", True, 2), (("25", "0"), True, 1),
                                           (("0", "25"), True, 1)):
        assert_same(bucketed(even, *my_share(x, y, even), bucket_mb, flip, set_to_none, passes), whole)
    # zero_grad() between a backward pass and step() is refused, also while
    # the buckets still wait for more passes.
    model = TwoBranches(9, flip)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), process_set=even,
                                         backward_passes_per_step=2)
    F.mse_loss(model(x[:4]), y[:4]).backward()
    try:
        optimizer.zero_grad()
        raise RuntimeError("zero_grad between backward and step was accepted")
    except AssertionError as e:
        assert "zero_grad" in str(e), e
    optimizer.step()
    optimizer.zero_grad()
    # Members whose parameters differ: the others than the first say which.
    model = TwoBranches(9, flip)
    named = [(("c." + n[2:]) if n.startswith("b.") and even.rank() == 1 else n, p)
             for n, p in model.named_parameters()]
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=named,
                                 process_set=even)
        assert even.rank() == 0, "different parameter names were accepted"
    except ValueError as e:
        assert even.rank() == 1, e
        assert ("this member's parameters differ from those of global rank 0, its first member: only here: "
                "c.bias, c.weight; only there: b.bias, b.weight") in str(e), e
    os.environ["HORA_TORCH_BUCKET_MB"] = "lots"
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(whole.parameters(), lr=0.1), process_set=even)
        raise RuntimeError("HORA_TORCH_BUCKET_MB=lots was accepted")
    except ValueError as e:
        assert "HORA_TORCH_BUCKET_MB must be a number of MiB, got 'lots'" in str(e), e
    finally:
        del os.environ["HORA_TORCH_BUCKET_MB"]
print("buckets ok", flush=True)

# synchronize() + skip_synchronize(), and the misuse Horovod refuses.
if odd.included():
    model = make_model(4)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), process_set=odd)
    F.mse_loss(model(x[:4]), y[:4]).backward()
    try:
        optimizer.zero_grad()
        raise RuntimeError("zero_grad between backward and step was accepted")
    except AssertionError as e:
        assert "zero_grad" in str(e)
    optimizer.synchronize()
    grads = [p.grad.clone() for p in model.parameters()]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    with optimizer.skip_synchronize():
        optimizer.step()
    for g, p in zip(grads, model.parameters()):
        assert torch.equal(g, p.grad)
    F.mse_loss(model(x[:4]), y[:4]).backward()
    try:
        F.mse_loss(model(x[:4]), y[:4]).backward()
        raise RuntimeError("a second backward pass was accepted")
    except AssertionError as e:
        assert "backward_passes_per_step" in str(e)
    optimizer.synchronize()
print("synchronize ok", flush=True)


# Two tasks on disjoint sets: concurrently, then each alone, to the same parameters.
def task(ps):
    seed = 10 if ps is even else 20
    tx, ty = batch(seed, 16)
    model = make_model(seed, hidden=8 if ps is even else 16)
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), process_set=ps)
    hvd.broadcast_parameters(model.state_dict(), root_rank=ps.ranks[0], process_set=ps)
    return train(model, optimizer, *my_share(tx, ty, ps), steps=20)


mine = even if even.included() else odd
together = task(mine)
for alone in (even, odd):
    if alone is mine:
        by_itself = task(mine)
    hvd.barrier()
assert_same(by_itself, together, atol=1e-12)  # fusion may round the last bit differently
assert_same(together, copy.deepcopy(hvd.broadcast_object(together, root_rank=mine.ranks[0], process_set=mine)),
            atol=0)
print("two tasks ok", flush=True)
print("done", flush=True)
