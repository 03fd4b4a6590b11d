"""Data-parallel training with MXNet on a process set: ``DistributedOptimizer``
(wraps an ``mx.optimizer.Optimizer``) and ``DistributedTrainer`` (a Gluon
``Trainer``), with the arguments of ``horovod.mxnet``'s."""

import numbers
import warnings

import mxnet as mx

from hora.common.core_types import Average
from hora.common.process_sets import global_process_set
from hora.mxnet import mpi_ops as _mpi_ops
from hora.mxnet.compression import Compression


def _groups(items, num_groups):
    """``items`` cut into ``num_groups`` consecutive groups of near-equal
    size (one group when ``num_groups`` is 0)."""
    if num_groups <= 0 or len(items) <= 1:
        return [items] if items else []
    base, extra = divmod(len(items), min(num_groups, len(items)))
    groups, start = [], 0
    for i in range(min(num_groups, len(items))):
        end = start + base + (1 if i < extra else 0)
        groups.append(items[start:end])
        start = end
    return groups


def _check_predivide(gradient_predivide_factor):
    if isinstance(gradient_predivide_factor, bool) or not isinstance(gradient_predivide_factor, numbers.Real) \
            or not gradient_predivide_factor > 0:
        raise ValueError(f"gradient_predivide_factor must be a positive number, got {gradient_predivide_factor!r}")
    return float(gradient_predivide_factor)


def _average_in_place(grads, names, num_groups, predivide, process_set):
    """Replaces each NDArray of ``grads`` by its average over ``process_set``
    (scaled by 1/predivide before the sum and predivide after it)."""
    for group_grads, group_names in zip(_groups(grads, num_groups), _groups(names, num_groups)):
        _mpi_ops.grouped_allreduce_(group_grads, name=f"{group_names[0]}:{group_names[-1]}", op=Average,
                                    prescale_factor=1.0 / predivide, postscale_factor=predivide,
                                    process_set=process_set)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps ``optimizer``: each update first averages its gradients over
    ``process_set`` (in place), then applies the wrapped optimizer. Every
    other attribute is the wrapped optimizer's. Members of the set must
    update the same parameters in the same order; non-members update
    locally."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0, process_set=global_process_set):
        # The wrapped optimizer keeps all the state; Optimizer.__init__ is not run.
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise ValueError(f"DistributedOptimizer wraps an mx.optimizer.Optimizer, got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._gradient_predivide_factor = _check_predivide(gradient_predivide_factor)
        self._num_groups = num_groups
        self._process_set = process_set

    _OWN_ATTRIBUTES = ("_optimizer", "_gradient_predivide_factor", "_num_groups", "_process_set")

    def __getattr__(self, item):
        optimizer = self.__dict__.get("_optimizer")
        if optimizer is None:
            raise AttributeError(item)
        return getattr(optimizer, item)

    def __setattr__(self, name, value):
        # What a Trainer sets (rescale_grad, param_dict, ...) is the wrapped optimizer's.
        if name in self._OWN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _average(self, index, grad):
        if not self._process_set.included() or self._process_set.size() == 1:
            return
        indices, grads = (list(index), list(grad)) if isinstance(index, (list, tuple)) else ([index], [grad])
        _average_in_place(grads, [str(i) for i in indices], self._num_groups, self._gradient_predivide_factor,
                          self._process_set)

    def update(self, index, weight, grad, state):
        self._average(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._average(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A Gluon ``Trainer`` whose ``step`` (and ``allreduce_grads``) averages
    the gradients over ``process_set`` instead of using a kvstore, so that
    ``step(batch_size)`` with each member's own batch size gives the update
    of one process on the members' batches together. ``compression``
    (``Compression.fp16``) applies to what travels; ``prefix`` names the ops
    (two trainers on one set need different prefixes); ``num_groups`` sends
    the gradients in that many grouped allreduces. Non-members of the set
    train locally."""

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0, process_set=global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer averages the gradients itself; the DistributedOptimizer it was "
                          "given has been unwrapped")
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError(f"prefix must be a string or None, got {type(prefix).__name__}")
        if isinstance(params, (list, tuple)):
            params = sorted(params, key=lambda param: param.name)  # the same order on every member
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._gradient_predivide_factor = _check_predivide(gradient_predivide_factor)
        self._prefix = prefix or ""
        self._num_groups = num_groups
        self._process_set = process_set

    def _allreduce_grads(self):
        if not self._process_set.included() or self._process_set.size() == 1:
            return
        params = [(i, param) for i, param in enumerate(self._params) if param.grad_req != "null"]
        compressed = [self._compression.compress(param.list_grad()[0]) for _, param in params]
        _average_in_place([grad for grad, _ in compressed], [f"{self._prefix}{i}" for i, _ in params],
                          self._num_groups, self._gradient_predivide_factor, self._process_set)
        if self._compression is not Compression.none:
            for (_, param), (grad, context) in zip(params, compressed):
                param.list_grad()[0][:] = self._compression.decompress(grad, context)
