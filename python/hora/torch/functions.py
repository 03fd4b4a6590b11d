"""Broadcasting model and optimizer state, and moving Python objects, over a
process set. Horovod's functions; each also takes ``process_set=``."""

import collections
import functools
import operator

import torch

from hora.common import objects as _objects
from hora.common.process_sets import global_process_set
from hora.torch import mpi_ops as _mpi_ops


def _named_tensors(params):
    if isinstance(params, dict):
        return sorted(params.items(), key=lambda item: str(item[0]))
    if isinstance(params, (list, tuple)) or hasattr(params, "__next__"):
        return [p if isinstance(p, tuple) else (None, p) for p in params]
    raise ValueError(f"invalid params of type: {type(params)}")


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites ``params`` in place with their values on ``root_rank``.

    ``params`` is a ``state_dict()``, a list from ``named_parameters()`` or
    ``parameters()``. All broadcasts are submitted at once, then awaited."""
    named = _named_tensors(params)
    if not named:
        return
    tensors = [p for _, p in named]
    names = [str(name) if name is not None else None for name, _ in named]
    for tensor in tensors:
        _mpi_ops.check(tensor)
    handles = [_mpi_ops.broadcast_async_(t, root_rank, n, process_set) for t, n in zip(tensors, names)]
    for handle in handles:
        _mpi_ops.synchronize(handle)


def _initialize_state(optimizer, model):
    """Gives a fresh optimizer its state by one step with zero gradients (as
    Horovod does), without allreducing anything. The parameters keep their
    values: a zero-gradient step still moves them (weight decay, momentum),
    which would undo an earlier ``broadcast_parameters``."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [p.detach().clone() for p in params]
    _zero_gradient_step(optimizer, model)
    with torch.no_grad():
        for p, value in zip(params, saved):
            p.copy_(value)


def _zero_gradient_step(optimizer, model):
    sparse_params = set()
    if model is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.sparse:
                sparse_params.update(id(p) for p in module.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse_params:
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_hora_distributed", False):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Overwrites the state and hyper-parameters of ``optimizer`` with those on
    ``root_rank``. Tensors are broadcast in place; scalars and other values
    travel pickled. ``model`` identifies sparse embeddings."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        _initialize_state(optimizer, model)
        state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        return  # a stateless optimizer: nothing to broadcast

    tensors, values, setters = [], {}, {}
    occurrences = collections.Counter()
    for index, group in enumerate(state_dict["param_groups"]):
        for option, value in group.items():
            if option == "params":
                continue
            key = f"{option}.{index}"
            values[key] = value
            setters[key] = functools.partial(operator.setitem, optimizer.param_groups[index], option)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # no gradient yet: no state
            param_state = state_dict["state"][pid]
            for name, value in param_state.items():
                occurrences[name] += 1
                key = f"{name}.{occurrences[name]}"
                if torch.is_tensor(value):
                    tensors.append((key, value))
                else:
                    values[key] = value
                    setters[key] = functools.partial(operator.setitem, param_state, name)

    broadcast_parameters(tensors, root_rank, process_set=process_set)
    for key, value in broadcast_object(values, root_rank, name="optimizer_state",
                                       process_set=process_set).items():
        setters[key](value)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns ``obj`` as it is on ``root_rank`` (a global rank), pickled
    with cloudpickle (lambdas and locally defined classes travel too) and
    broadcast over the set."""
    return _objects.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every member's ``obj`` (pickled with cloudpickle),
    in set-rank order."""
    return _objects.allgather_object(obj, name, process_set)
