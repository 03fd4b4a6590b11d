"""DistributedOptimizer: averages gradients over a process set before each step."""

import warnings
from contextlib import contextmanager

import torch

from hora.common import basics as _basics
from hora.common import core_types as _types
from hora.common.core_types import Adasum, Average
from hora.common.process_sets import global_process_set
from hora.torch import mpi_ops as _mpi_ops
from hora.torch.buckets import Bucket, bucket_bytes, form_buckets
from hora.torch.adasum_optimizer import _DistributedAdasumOptimizer
from hora.torch.compression import Compression
from hora.torch.functions import broadcast_object


def _split_evenly(items, parts):
    """``parts`` consecutive slices whose lengths differ by at most one."""
    base, extra = divmod(len(items), parts)
    bounds = [i * base + min(i, extra) for i in range(parts + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(parts)]


def checked_named_parameters(param_groups, named_parameters):
    """``named_parameters`` as a list of (name, parameter), made up when
    None; ValueError, with Horovod's messages, unless every parameter of
    ``param_groups`` has one unique name."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [(f"allreduce.noname.{i}.{j}", v) for i, group in enumerate(param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    duplicates = sorted({k for k in names if names.count(k) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         f"Found duplicates: {', '.join(duplicates)}")
    all_ids = {id(v) for group in param_groups for v in group["params"]}
    unnamed = all_ids - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                         f"Python object ids: {', '.join(str(i) for i in unnamed)}")
    return named_parameters


class _DistributedOptimizer:
    """The methods of the class ``DistributedOptimizer`` makes: a direct
    subclass of the wrapped optimizer's class whose namespace is a copy of
    this one's, so that, as in Horovod, ``super(type(opt), opt).step()`` is
    the wrapped optimizer's own step (``broadcast_optimizer_state`` and user
    code rely on that to step without communicating). Each parameter's hook
    counts its gradient once backward has accumulated it
    ``backward_passes_per_step`` times, and a bucket's allreduce (buckets.py;
    or the parameter's own, without buckets, or its group's, with ``groups``)
    starts once all of its gradients are in; ``synchronize()`` (called by
    ``step()``) waits for them and writes the averaged gradients back. Runs on
    the thread that calls backward and step."""

    _hora_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        self._hora_base_class.__init__(self, params)
        self._compression = compression
        named_parameters = checked_named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = global_process_set if process_set is None else process_set
        self._handles = {}
        self._accumulators = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        if groups is not None:
            self._check_groups(groups)
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        # Buckets need an elementwise compression: what a custom compressor
        # does to a flat bucket may differ from what it does to each tensor.
        builtin = compression in (Compression.none, Compression.fp16)
        self._bucket_bytes = bucket_bytes() if groups is None and builtin else 0
        self._bucket_of = {}
        self._buckets = []  # each bucket once, in the order they form
        self._bucket_pending = False  # gradients counted since the last synchronize()
        # The step's last bucket, complete but not started: synchronize()
        # runs it on the calling thread (docs/torch.md, "Gradient buckets").
        self._deferred = None
        if self.process_set.included() and _basics.size() > 1:
            self._register_hooks()

    @staticmethod
    def _check_groups(groups):
        if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
            raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))

    def _agreed_order(self):
        """The parameters to reduce, in the order of the set's first rank; its
        bucket size is taken too, so that every member forms the same buckets."""
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        names, self._bucket_bytes = broadcast_object(
            ([self._parameter_names.get(p) for p in params], self._bucket_bytes),
            root_rank=self.process_set.ranks[0], name="DistributedOptimizer.groups", process_set=self.process_set)
        position = {name: i for i, name in enumerate(names)}
        mine = {self._parameter_names.get(p) for p in params}
        if set(position) != mine:
            def listed(names):
                names = sorted(names)
                return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") or "none"
            raise ValueError(f"DistributedOptimizer on process set {self.process_set.process_set_id}: this member's "
                             f"parameters differ from those of global rank {self.process_set.ranks[0]}, its first "
                             f"member: only here: {listed(mine - set(position))}; only there: "
                             f"{listed(set(position) - mine)}")
        params.sort(key=lambda p: position[self._parameter_names.get(p)])
        return params

    def _form_buckets(self):
        params = self._agreed_order()
        if self._bucket_bytes <= 0:
            return
        for bucket in form_buckets(params, self._parameter_names, self._bucket_bytes):
            self._buckets.append(bucket)
            for p in bucket.params:
                self._bucket_of[p] = bucket

    def _form_groups(self):
        # Every member orders the parameters as the set's first rank does.
        params = self._agreed_order()
        if isinstance(self._groups, list):
            ids = {id(p) for p in params}
            p_groups = [[p for p in group if id(p) in ids] for group in self._groups]
            grouped = {id(p) for group in p_groups for p in group}
            p_groups += [[p] for p in params if id(p) not in grouped]
        else:
            p_groups = _split_evenly(params, self._groups)
        for group in map(tuple, p_groups):
            if not group:
                continue
            for p in group:
                self._p_to_group[p] = group
            self._group_counts[group] = 0

    def _register_hooks(self):
        if self._groups is not None:
            self._form_groups()
        else:
            # Every member asks, so that all take the first member's size.
            self._form_buckets()
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # The hook sits on p's gradient accumulator (kept alive
                    # here), so it fires once p.grad is accumulated and stays
                    # with p: a deep copy of the model gets fresh accumulators.
                    accumulator = p.view_as(p).grad_fn.next_functions[0][0]
                    accumulator.register_hook(self._make_hook(p))
                    self._accumulators.append(accumulator)

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Another member may have a gradient for p: take part with zeros.
            p.grad = torch.zeros_like(p)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return _mpi_ops.sparse_allreduce_async(tensor, name=name, op=self.op,
                                                       process_set=self.process_set), None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scale_factors()
        handle = _mpi_ops.allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                           postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, group):
        name = self._parameter_names.get(group[0])
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in group])
        prescale, postscale = self._scale_factors()
        handle = _mpi_ops.grouped_allreduce_async_(list(compressed), name=name, op=self.op,
                                                   prescale_factor=prescale, postscale_factor=postscale,
                                                   process_set=self.process_set)
        return handle, ctxs

    def _packs(self, bucket):
        """Whether `bucket` is reduced as one packed tensor."""
        return len(bucket.params) > 1 and (self.sparse_as_dense or bucket.dense())

    def _bucket_allreduce_async(self, bucket, caller_waits=False):
        """Starts `bucket`'s allreduce (its parameter's own, in place, for a
        bucket of one; its parameters' own where a gradient is sparse);
        returns its handle entries {key: (handle, ctx)}. `caller_waits`: the
        caller synchronizes it at once, on its own thread."""
        bucket.counted.clear()
        if not self._packs(bucket):
            return {p: self._allreduce_grad_async(p) for p in bucket.params}
        compressed, ctx = self._compression.compress(bucket.pack())
        prescale, postscale = self._scale_factors()
        handle = _mpi_ops.collectives._allreduce(compressed, None, bucket.name, self.op, prescale, postscale,
                                                 self.process_set, True, caller_waits)
        return {bucket: (handle, ctx)}

    def _last_to_start(self, bucket):
        """Whether every other bucket of this step has started."""
        return all(b is bucket or b in self._handles or any(p in self._handles for p in b.params)
                   for b in self._buckets)

    def _bucket_hook(self, p):
        if self._allreduce_delay[p] <= 0:
            raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                 "call to step(). Increase backward_passes_per_step to accumulate gradients "
                                 "locally.")
        self._allreduce_delay[p] -= 1
        self._bucket_pending = True
        if self._allreduce_delay[p] > 0:
            return
        bucket = self._bucket_of[p]
        bucket.counted.add(id(p))
        if bucket.complete():
            if self._packs(bucket) and self._last_to_start(bucket):
                # Nothing else of the step is left to overlap with: started
                # now, it would run on the set's engine thread and wake this
                # one when done; synchronize() runs it here instead.
                self._deferred = bucket
                return
            self._handles.update(self._bucket_allreduce_async(bucket))

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._bucket_of:
                return self._bucket_hook(p)
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                     "call to step(). Increase backward_passes_per_step to accumulate gradients "
                                     "locally.")
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for member in group:
                            self._handles.pop(member, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce and writes the results into
        ``p.grad``; starts those that backward did not."""
        if not self.process_set.included():
            self._synchronized = True
            return
        # Buckets backward did not complete start now, whole; the deferred
        # last bucket after the others, for the caller to run.
        deferred, self._deferred = self._deferred, None
        for bucket in self._buckets:
            if bucket is not deferred and bucket not in self._handles and \
                    not any(p in self._handles for p in bucket.params):
                self._handles.update(self._bucket_allreduce_async(bucket))
        if deferred is not None:
            self._handles.update(self._bucket_allreduce_async(deferred, caller_waits=True))
        done = set()
        for key in self._handles:
            if isinstance(key, Bucket):
                done.update(key.params)
            else:
                done.update(key) if isinstance(key, tuple) else done.add(key)
        for p in self._requires_update - done:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, Bucket):
                key.unpack(self._compression.decompress(_mpi_ops.synchronize(handle), ctx))
                for p in key.params:
                    self._allreduce_delay[p] = self.backward_passes_per_step
            elif isinstance(key, tuple):
                for p, output, p_ctx in zip(key, _mpi_ops.synchronize(handle), ctx):
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    p.grad.set_(self._compression.decompress(output, p_ctx))
                self._group_counts[key] = 0
            else:
                self._store_gradient(key, _mpi_ops.synchronize(handle), ctx)
        self._handles.clear()
        self._bucket_pending = False
        self._synchronized = True

    def _store_gradient(self, p, output, ctx):
        self._allreduce_delay[p] = self.backward_passes_per_step
        if self._groups is not None and self._p_to_group.get(p) in self._group_counts:
            self._group_counts[self._p_to_group[p]] = 0
        if p.grad.is_sparse:
            reduced = self._compression.decompress(output, ctx)
            if not reduced.is_sparse:
                reduced = reduced.to_sparse()
            p.grad.zero_().add_(reduced)
        else:
            p.grad.set_(self._compression.decompress(output, ctx))

    @contextmanager
    def skip_synchronize(self):
        """Within it, ``step()`` does not synchronize (call ``synchronize()`` first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return self._local_step(closure)

    def _local_step(self, closure=None):
        """The wrapped optimizer's own step, without any communication."""
        return self._hora_base_class.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles or self._bucket_pending:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return self._hora_base_class.zero_grad(self, *args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes
        for bucket in self._buckets:
            bucket.counted.clear()
        self._bucket_pending = False
        self._deferred = None

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for bucket in self._buckets:
            bucket.counted.clear()
        self._bucket_pending = False
        self._deferred = None
        self._hora_base_class.load_state_dict(self, *args, **kwargs)


def _subclass_of(base, methods=_DistributedOptimizer):
    """A subclass of ``base`` holding ``methods``' methods."""
    namespace = {k: v for k, v in vars(methods).items() if k not in ("__dict__", "__weakref__")}
    namespace["_hora_base_class"] = base
    return type(base.__name__, (base,), namespace)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged (or
    reduced by ``op``) over ``process_set``.

    The result is an instance of a subclass of ``optimizer``'s class with the
    same parameter groups. Members outside ``process_set`` step locally.
    ``groups`` (an int or a list of lists of parameters) fuses gradients into
    grouped allreduces; the parameter order is taken from the set's first rank.
    With ``op=Adasum`` (and more than one rank) the members' parameter updates
    are combined instead, as Horovod's delta optimizer does (see
    hora.torch.adasum_optimizer).
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    op = _types.resolve_reduce_op(op, None)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum and _basics.size() > 1:
        named_parameters = checked_named_parameters(optimizer.param_groups, named_parameters)
        cls = _subclass_of(optimizer.__class__, _DistributedAdasumOptimizer)
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, process_set)
    cls = _subclass_of(optimizer.__class__)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
