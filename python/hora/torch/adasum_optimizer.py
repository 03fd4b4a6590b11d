"""DistributedOptimizer(op=Adasum): combines the members' parameter updates
with Adasum, as Horovod's delta optimizer does.

Adasum applies to what a local step changes, not to the gradient: when
backward has accumulated a parameter's gradient ``backward_passes_per_step``
times, its hook remembers the parameter, runs the wrapped optimizer's step
on that parameter alone, and starts an in-place Adasum allreduce of the
change (the delta) over the process set. ``step()`` waits for them and sets
each parameter to its value before the local step plus the combined delta.
The core refuses (ValueError) a set whose size is not a power of two.
"""

import torch

from hora.common.core_types import Adasum
from hora.common.process_sets import global_process_set
from hora.torch import mpi_ops as _mpi_ops


class _DistributedAdasumOptimizer:
    """The methods of the class ``DistributedOptimizer(op=Adasum)`` makes: a
    direct subclass of the wrapped optimizer's class (``_hora_base_class``)
    whose namespace is a copy of this one's. Runs on the thread that calls
    backward and step. Members outside the process set step locally."""

    _hora_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 process_set=global_process_set):
        """``named_parameters``: every parameter as (unique name, parameter)."""
        self._hora_base_class.__init__(self, params)
        self._compression = compression
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.process_set = global_process_set if process_set is None else process_set
        self._handles = {}
        self._accumulators = []
        self._requires_update = set()
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for _, p in named_parameters}
        if self.process_set.included():
            self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
                    self._requires_update.add(p)
                    accumulator = p.view_as(p).grad_fn.next_functions[0][0]
                    accumulator.register_hook(self._make_hook(p))
                    self._accumulators.append(accumulator)

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                     "call to step(). Increase backward_passes_per_step to accumulate gradients "
                                     "locally.")
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._delta_allreduce_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def _local_step_on(self, p):
        """The wrapped optimizer's step on parameter ``p`` alone."""
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            self._hora_base_class.step(self)
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _delta_allreduce_async(self, p):
        """Steps ``p`` locally, turns ``p`` into the step's delta and starts
        its Adasum allreduce in place; returns (handle, compression context)."""
        start = self._starting_models[p]
        with torch.no_grad():
            start.copy_(p)
        self._local_step_on(p)
        with torch.no_grad():
            p.sub_(start)
        compressed, ctx = self._compression.compress(p.detach())
        handle = _mpi_ops.allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum,
                                           process_set=self.process_set)
        return handle, ctx

    def synchronize(self):
        """Nothing to do: ``step()`` waits for the deltas (as in Horovod)."""

    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")

    def step(self, closure=None):
        if not self.process_set.included():
            return self._hora_base_class.step(self, closure)
        loss = closure() if closure is not None else None
        missing = sorted(self._requires_update - set(self._handles), key=lambda p: self._parameter_names.get(p))
        for p in missing:
            self._handles[p] = self._delta_allreduce_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes
                handle, ctx = self._delta_allreduce_async(p)
            delta = self._compression.decompress(_mpi_ops.synchronize(handle), ctx)
            start = self._starting_models[p]
            with torch.no_grad():
                start.add_(delta)
                p.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return self._hora_base_class.zero_grad(self, *args, **kwargs)
