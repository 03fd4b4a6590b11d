"""broadcast_parameters, broadcast_optimizer_state, broadcast_object,
allgather_object and SyncBatchNorm, on the global set and on sets. 4 ranks."""

import torch
import torch.nn.functional as F

import hora.torch as hvd

hvd.init()
me = hvd.rank()
torch.set_num_threads(1)
SETS = [hvd.global_process_set, hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3]), hvd.ProcessSet([1, 2, 3])]


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def check_broadcasts(ps):
    root = ps.ranks[-1]
    # Parameters, from a state_dict and from named_parameters().
    model = make_model(me)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=ps)
    for p, q in zip(model.parameters(), make_model(root).parameters()):
        assert torch.equal(p, q)
    model = make_model(me)
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=ps.ranks[0], process_set=ps)
    for p, q in zip(model.parameters(), make_model(ps.ranks[0]).parameters()):
        assert torch.equal(p, q)

    # Optimizer state: Adam after a different number of steps and a different rate on each member.
    def trained(rank):
        model = make_model(0)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
        for step in range(rank + 1):
            optimizer.zero_grad()
            model(torch.full((2, 3), float(step))).sum().backward()
            optimizer.step()
        return optimizer

    optimizer = trained(me)
    hvd.broadcast_optimizer_state(optimizer, root_rank=root, process_set=ps)
    expected = trained(root)
    assert optimizer.param_groups[0]["lr"] == expected.param_groups[0]["lr"]
    mine, theirs = optimizer.state_dict()["state"], expected.state_dict()["state"]
    assert mine.keys() == theirs.keys()
    for key in mine:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(mine[key][name], theirs[key][name]), (key, name)
    # A fresh optimizer gets its state initialized, then broadcast.
    fresh = torch.optim.SGD(make_model(me).parameters(), lr=0.1 * (me + 1), momentum=0.5)
    hvd.broadcast_optimizer_state(fresh, root_rank=root, process_set=ps)
    assert fresh.param_groups[0]["lr"] == 0.1 * (root + 1)

    # Objects.
    obj = {"rank": me, "text": "x" * me, "tensor": torch.arange(me + 1)}
    got = hvd.broadcast_object(obj, root_rank=root, process_set=ps)
    assert got["rank"] == root and got["text"] == "x" * root and torch.equal(got["tensor"], torch.arange(root + 1))
    everyone = hvd.allgather_object(obj, process_set=ps)
    assert [o["rank"] for o in everyone] == ps.ranks
    assert [o["text"] for o in everyone] == ["x" * r for r in ps.ranks]


def check_sync_batch_norm(ps):
    """Each member normalizes its rows with the statistics of every member's
    rows together: the same output, input gradient, running statistics and
    (summed over the set) parameter gradients as BatchNorm on the whole batch."""
    rows = {r: r + 2 for r in ps.ranks}
    inputs = {r: torch.randn(rows[r], 3, 2, generator=torch.Generator().manual_seed(r), dtype=torch.float64)
              for r in ps.ranks}
    weights = {r: torch.randn(rows[r], 3, 2, generator=torch.Generator().manual_seed(50 + r), dtype=torch.float64)
               for r in ps.ranks}

    reference = torch.nn.BatchNorm1d(3).double()
    whole = torch.cat([inputs[r] for r in ps.ranks]).requires_grad_()
    for _ in range(2):
        out = reference(whole)
    (out * torch.cat([weights[r] for r in ps.ranks])).sum().backward()
    start = sum(rows[r] for r in ps.ranks if r < me)

    sync = hvd.SyncBatchNorm(3, process_set=ps).double()
    x = inputs[me].clone().requires_grad_()
    for _ in range(2):
        y = sync(x)
    (y * weights[me]).sum().backward()
    torch.testing.assert_close(y, out[start:start + rows[me]])
    torch.testing.assert_close(x.grad, whole.grad[start:start + rows[me]])
    torch.testing.assert_close(sync.running_mean, reference.running_mean)
    torch.testing.assert_close(sync.running_var, reference.running_var)
    assert int(sync.num_batches_tracked) == 2
    torch.testing.assert_close(hvd.allreduce(sync.weight.grad, op=hvd.Sum, process_set=ps), reference.weight.grad)
    torch.testing.assert_close(hvd.allreduce(sync.bias.grad, op=hvd.Sum, process_set=ps), reference.bias.grad)
    sync.eval()  # running statistics, no communication
    torch.testing.assert_close(sync(x.detach()), F.batch_norm(x.detach(), reference.running_mean,
                                                              reference.running_var, reference.weight,
                                                              reference.bias))


for ps in SETS:
    if ps.included():
        check_broadcasts(ps)
        check_sync_batch_norm(ps)
        print(f"set {ps.ranks} ok", flush=True)
print("done", flush=True)
