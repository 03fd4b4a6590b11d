"""The collectives on torch tensors without autograd: the asynchronous and
in-place forms, handles, ``poll``/``synchronize``, ``join`` and ``barrier``,
as hora.common.ops implements them for every framework, plus torch's sparse
allreduce.

Names, signatures and defaults are those of ``horovod.torch`` 0.28. Every op
takes ``process_set=`` (default: the global set); roots are global ranks.
Inputs are never modified except by the ``*_`` forms.
"""

import torch

from hora.common import core_types as _types
from hora.common.handles import DerivedHandle
from hora.common.ops import Collectives, barrier, join, poll, synchronize  # noqa: F401
from hora.common.process_sets import global_process_set
from hora.torch.adapter import TorchAdapter

collectives = Collectives(TorchAdapter())
check = collectives.check
check_list = collectives.check_list

allreduce_async = collectives.allreduce_async
allreduce_async_ = collectives.allreduce_async_
allreduce_ = collectives.allreduce_
grouped_allreduce_async = collectives.grouped_allreduce_async
grouped_allreduce_async_ = collectives.grouped_allreduce_async_
grouped_allreduce_ = collectives.grouped_allreduce_
allgather_async = collectives.allgather_async
grouped_allgather_async = collectives.grouped_allgather_async
broadcast_async = collectives.broadcast_async
broadcast_async_ = collectives.broadcast_async_
broadcast_ = collectives.broadcast_
alltoall_async = collectives.alltoall_async
reducescatter_async = collectives.reducescatter_async
grouped_reducescatter_async = collectives.grouped_reducescatter_async


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by allgathering its indices and values
    (duplicates add up when the result is coalesced). Returns a callable
    handle; ``synchronize(handle)`` or ``handle()`` gives the sparse result."""
    op = _types.resolve_reduce_op(op, None)
    if op not in (_types.Sum, _types.Average):
        raise ValueError("sparse_allreduce_async supports only the Sum and Average reductions")
    t = tensor.coalesce()
    ps = global_process_set if process_set is None else process_set
    indices = t.indices().transpose(0, 1).contiguous()
    values = t.values().contiguous()
    names = [f"{name}.indices", f"{name}.values"] if name else [None, None]
    gathered = [allgather_async(indices, names[0], ps), allgather_async(values, names[1], ps)]

    def combine(results):
        all_indices, all_values = results
        if op == _types.Average:
            all_values = all_values / ps.size()
        return torch.sparse_coo_tensor(all_indices.transpose(0, 1), all_values, t.size(), check_invariants=True)

    return DerivedHandle(gathered, combine)
