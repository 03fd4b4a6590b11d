"""Restoring a checkpoint on rank 0 and broadcasting it: for every
torch.optim optimizer, ranks whose fresh optimizer has no state and rank 0,
whose optimizer was loaded from the checkpoint, take the same path through
broadcast_optimizer_state and end with rank 0's state. Also: the class
DistributedOptimizer makes is a direct subclass of the wrapped class, so
``super(type(opt), opt).step()`` steps locally, without communicating.
Run on 4 ranks."""

import inspect
import io

import torch
import torch.nn.functional as F

import hora.torch as hvd

hvd.init()
me = hvd.rank()
torch.set_num_threads(1)
OPTIONS = dict(lr=0.05, momentum=0.9, weight_decay=0.1)


def optimizer_classes():
    excluded = (torch.optim.LBFGS, torch.optim.SparseAdam)  # no broadcastable state / sparse gradients only
    classes = [c for c in torch.optim.Optimizer.__subclasses__()
               if c.__module__.startswith("torch.optim") and c not in excluded]
    return sorted(classes, key=lambda c: c.__name__)


def make(cls, seed):
    torch.manual_seed(seed)
    # Matrices only: some optimizers (Muon) accept nothing else.
    model = torch.nn.Sequential(torch.nn.Linear(6, 4, bias=False), torch.nn.Tanh(), torch.nn.Linear(4, 3, bias=False))
    accepted = inspect.signature(cls.__init__).parameters
    opt = cls(model.parameters(), **{k: v for k, v in OPTIONS.items() if k in accepted})
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())


def state_bytes(opt):
    buffer = io.BytesIO()
    torch.save(opt.state_dict()["state"], buffer)
    return buffer.getvalue()


def check_local_step_does_not_communicate():
    model, opt = make(torch.optim.SGD, 1)
    assert type(opt).__mro__[1] is torch.optim.SGD, type(opt).__mro__
    F.mse_loss(model(torch.ones(2, 6)), torch.zeros(2, 3)).backward()
    if me == 0:  # only rank 0: a distributed step would wait for the others forever
        super(type(opt), opt).step()
    hvd.barrier()
    opt.synchronize()  # collect the gradients' allreduces backward started
    print(f"rank {me}: local step ok", flush=True)


def check_checkpoint_restored_on_rank_0(cls):
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(me))
    y = torch.randn(8, 3, generator=torch.Generator().manual_seed(100 + me))
    model, opt = make(cls, 7)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    checkpoint = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint)

    model, opt = make(cls, 7)
    if me == 0:
        checkpoint.seek(0)
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    states = hvd.allgather_object(state_bytes(opt), name=f"state.{cls.__name__}")
    assert all(s == states[0] for s in states), f"{cls.__name__}: optimizer state differs between ranks"
    params = hvd.allgather_object([p.detach().clone() for p in model.parameters()], name=f"params.{cls.__name__}")
    for other in params[1:]:
        assert all(torch.equal(a, b) for a, b in zip(params[0], other)), f"{cls.__name__}: parameters differ"
    print(f"rank {me}: {cls.__name__} restored ok", flush=True)


check_local_step_does_not_communicate()
for cls in optimizer_classes():
    check_checkpoint_restored_on_rank_0(cls)
print(f"rank {me}: optimizer state done", flush=True)
hvd.shutdown()
