"""The gradients of the differentiable collectives, on every set, against the
gradient autograd computes for the same objective on one process that plays
every member. Horovod's gradients correspond to these objectives (l_r is the
loss member r computes from its output, n the set's size):

    allreduce, alltoall        sum_r l_r
    allgather, broadcast       (1/n) sum_r l_r
    reducescatter              n sum_r l_r
Run on 4 ranks."""

import torch

import hora.torch as hvd

hvd.init()
me = hvd.rank()
SETS = [hvd.global_process_set, hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3]), hvd.ProcessSet([1, 2, 3])]


def weight(r, shape, dtype):
    """The weights of member r's loss, distinct per member and element."""
    return (torch.arange(torch.Size(shape).numel(), dtype=dtype).reshape(shape) + 1) * (r + 1)


def check(label, ps, make_input, run, simulate, scale, dtype):
    """``run(x)`` is the real collective on this member; ``simulate(inputs)``
    returns what each member would get, computed locally from every member's input."""
    ranks = ps.ranks
    inputs = {r: make_input(r, dtype).requires_grad_() for r in ranks}
    outputs = simulate(inputs)
    objective = scale * sum((outputs[r] * weight(r, outputs[r].shape, dtype)).sum() for r in ranks)
    objective.backward()
    expected = inputs[me].grad
    if expected is None:  # the outputs do not depend on this member's input
        expected = torch.zeros_like(inputs[me])

    x = make_input(me, dtype).requires_grad_()
    y = run(x)
    (y * weight(me, y.shape, dtype)).sum().backward()
    torch.testing.assert_close(y.detach(), outputs[me].detach(), msg=f"{label} output")
    torch.testing.assert_close(x.grad, expected, msg=f"{label} gradient")


def rows(r, dtype):
    return torch.arange(2 * (r + 1), dtype=dtype).reshape(r + 1, 2) + r


def square(r, dtype):
    return torch.arange(12, dtype=dtype).reshape(4, 3) / (r + 1)


def check_set(ps):
    n, ranks = ps.size(), ps.ranks
    index = ranks.index

    def block(tensor, i):
        base, extra = divmod(tensor.shape[0], n)
        start = i * base + min(i, extra)
        return tensor[start:start + base + (1 if i < extra else 0)]

    for dtype in (torch.float32, torch.float64):
        for op in (hvd.Sum, hvd.Average):
            check(f"allreduce {op}", ps, square, lambda x: hvd.allreduce(x, op=op, process_set=ps),
                  lambda xs: {r: sum(xs.values()) / (n if op == hvd.Average else 1) for r in ranks}, 1, dtype)
        check("allreduce scaled", ps, square,
              lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, process_set=ps),
              lambda xs: {r: 3.0 * sum(0.5 * v for v in xs.values()) for r in ranks}, 1, dtype)
        check("grouped_allreduce", ps, square,
              lambda x: sum(hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=ps)),
              lambda xs: {r: 3 * sum(xs.values()) for r in ranks}, 1, dtype)
        check("allgather", ps, rows, lambda x: hvd.allgather(x, process_set=ps),
              lambda xs: {r: torch.cat([xs[k] for k in ranks]) for r in ranks}, 1 / n, dtype)
        check("grouped_allgather", ps, rows,
              lambda x: torch.cat(hvd.grouped_allgather([x, 3 * x], process_set=ps)),
              lambda xs: {r: torch.cat([torch.cat([xs[k] for k in ranks]), torch.cat([3 * xs[k] for k in ranks])])
                          for r in ranks}, 1 / n, dtype)
        for root in (ranks[0], ranks[-1]):
            check(f"broadcast from {root}", ps, square, lambda x: hvd.broadcast(x, root, process_set=ps),
                  lambda xs: {r: xs[root] * 1 for r in ranks}, 1 / n, dtype)

        # Alltoall: member k sends i+1 rows to member i.
        def to_all(r, dtype):
            return torch.arange(3 * n * (n + 1) // 2, dtype=dtype).reshape(-1, 3) * (r + 1)

        splits = [i + 1 for i in range(n)]

        def exchange(xs):
            def part(x, i):
                start = sum(splits[:i])
                return x[start:start + splits[i]]
            return {r: torch.cat([part(xs[k], index(r)) for k in ranks]) for r in ranks}

        check("alltoall", ps, to_all, lambda x: hvd.alltoall(x, splits=splits, process_set=ps)[0], exchange, 1, dtype)
        for op in (hvd.Sum, hvd.Average):
            check(f"reducescatter {op}", ps, square, lambda x: hvd.reducescatter(x, op=op, process_set=ps),
                  lambda xs: {r: block(sum(xs.values()), index(r)) / (n if op == hvd.Average else 1)
                              for r in ranks}, n, dtype)
        check("grouped_reducescatter", ps, square,
              lambda x: torch.cat(hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum, process_set=ps)),
              lambda xs: {r: torch.cat([block(sum(xs.values()), index(r)), block(2 * sum(xs.values()), index(r))])
                          for r in ranks}, n, dtype)


for ps in SETS:
    if ps.included():
        check_set(ps)
        print(f"set {ps.ranks} gradients ok", flush=True)
print("done", flush=True)
