"""The *_async forms are asynchronous: while one member (rank 3) has not yet
submitted an op, the others' *_async calls have returned and their poll()
stays False; the op completes once rank 3 submits it. Every async form of
hora.torch, and one of hora.numpy. Run on 4 ranks."""

import time

import numpy as np
import torch

import hora.numpy as hnp
import hora.torch as hvd

hvd.init()
me = hvd.rank()
LATE = 3
POLL_SECONDS = 0.4


def expected_rows(r):
    return torch.full((r + 1, 2), r, dtype=torch.int32)


OPS = {
    "allreduce": (lambda: hvd.allreduce_async(torch.full((3,), float(me)), op=hvd.Sum, name="late.allreduce"),
                  lambda out: torch.equal(out, torch.full((3,), 6.0))),
    "allreduce_": (lambda: hvd.allreduce_async_(torch.full((3,), float(me)), op=hvd.Max, name="late.allreduce_"),
                   lambda out: torch.equal(out, torch.full((3,), 3.0))),
    "grouped_allreduce": (lambda: hvd.grouped_allreduce_async([torch.ones(2), torch.ones(1)], op=hvd.Sum,
                                                              name="late.grouped"),
                          lambda out: torch.equal(out[0], torch.full((2,), 4.0))),
    "allgather": (lambda: hvd.allgather_async(expected_rows(me), name="late.allgather"),
                  lambda out: torch.equal(out, torch.cat([expected_rows(r) for r in range(4)]))),
    "grouped_allgather": (lambda: hvd.grouped_allgather_async([expected_rows(me)], name="late.grouped_allgather"),
                          lambda out: torch.equal(out[0], torch.cat([expected_rows(r) for r in range(4)]))),
    "broadcast": (lambda: hvd.broadcast_async(torch.full((2,), float(me)), root_rank=LATE, name="late.broadcast"),
                  lambda out: torch.equal(out, torch.full((2,), float(LATE)))),
    "broadcast_": (lambda: hvd.broadcast_async_(torch.full((2,), float(me)), root_rank=LATE, name="late.broadcast_"),
                   lambda out: torch.equal(out, torch.full((2,), float(LATE)))),
    "alltoall": (lambda: hvd.alltoall_async(torch.arange(4.0) + 10 * me, name="late.alltoall"),
                 lambda out: torch.equal(out[0], torch.tensor([10.0 * r + me for r in range(4)]))),
    "reducescatter": (lambda: hvd.reducescatter_async(torch.full((4, 2), float(me)), op=hvd.Sum,
                                                      name="late.reducescatter"),
                      lambda out: torch.equal(out, torch.full((1, 2), 6.0))),
    "grouped_reducescatter": (lambda: hvd.grouped_reducescatter_async([torch.full((4,), float(me))], op=hvd.Sum,
                                                                      name="late.grouped_reducescatter"),
                              lambda out: torch.equal(out[0], torch.full((1,), 6.0))),
    "numpy allreduce": (lambda: hnp.allreduce_async(np.full(2, me), op=hnp.Sum, name="late.numpy"),
                        lambda out: np.array_equal(out, [6, 6])),
}

for kind, (submit, correct) in OPS.items():
    if me != LATE:
        start = time.monotonic()
        handle = submit()
        assert time.monotonic() - start < 5.0, f"{kind}: the async call waited for rank {LATE}"
        deadline = time.monotonic() + POLL_SECONDS
        while time.monotonic() < deadline:
            assert not hvd.poll(handle), f"{kind}: poll() is True before rank {LATE} submitted the op"
            time.sleep(0.02)
        hvd.barrier()  # lets rank LATE submit
    else:
        hvd.barrier()
        handle = submit()
    result = hvd.synchronize(handle)
    assert hvd.poll(handle), kind
    assert correct(result), (kind, result)
print("async ok", flush=True)
