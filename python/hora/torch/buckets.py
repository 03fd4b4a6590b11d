"""Gradient buckets of DistributedOptimizer: the gradients of many parameters
packed into one flat buffer and reduced by one allreduce (torch DDP's way),
instead of one allreduce per parameter.

Buckets hold consecutive parameters of one dtype and device, in the reverse
of the order the set's first rank registered them (backward produces the
last layers' gradients first), up to ``HORA_TORCH_BUCKET_MB`` MiB each
(default 25, DDP's default; 0: one allreduce per parameter, as Horovod). A
gradient of ALONE_BYTES (1 MiB) or more is a bucket of its own and is
reduced where it is, without the copies: packing pays for small gradients,
whose allreduces cost more than their copies. A bucket's allreduce starts as soon as backward has produced all of its
gradients; ``synchronize()`` starts the rest, with zeros for parameters
that got no gradient. Every member forms the same buckets and starts each
exactly once per step, whatever order its gradients arrive in, so members
agree on every op. Elementwise reductions do not care how tensors are
packed: the results are those of one allreduce per parameter."""

import os

import torch

DEFAULT_BUCKET_MB = 25.0
ALONE_BYTES = 1 << 20


def bucket_bytes():
    """The bucket size HORA_TORCH_BUCKET_MB asks for, in bytes (0: no buckets);
    ValueError naming the variable when it is not a non-negative number."""
    text = os.environ.get("HORA_TORCH_BUCKET_MB", "").strip()
    if not text:
        return int(DEFAULT_BUCKET_MB * 2**20)
    try:
        megabytes = float(text)
    except ValueError:
        raise ValueError(f"HORA_TORCH_BUCKET_MB must be a number of MiB, got {text!r}") from None
    if not 0 <= megabytes < 2**40:
        raise ValueError(f"HORA_TORCH_BUCKET_MB must be a finite number of MiB, not negative, got {text!r}")
    return int(megabytes * 2**20)


class Bucket:
    """Consecutive parameters of one dtype and device, and the flat buffer
    their gradients are reduced in."""

    def __init__(self, index, params, name):
        self.index = index
        self.params = tuple(params)
        self.name = name
        self.offsets = []
        offset = 0
        for p in self.params:
            self.offsets.append(offset)
            offset += p.numel()
        self.numel = offset
        self.counted = set()   # ids of the parameters whose gradient is in for this step
        self._buffer = None

    def __repr__(self):
        return f"Bucket({self.name}, {len(self.params)} parameters)"

    def complete(self):
        return len(self.counted) == len(self.params)

    def dense(self):
        """Whether every gradient is dense (a sparse one makes the bucket's
        parameters go one by one)."""
        return not any(p.grad is not None and p.grad.is_sparse for p in self.params)

    def pack(self):
        """The gradients copied into the bucket's flat buffer (zeros for a
        parameter without one)."""
        first = self.params[0]
        if self._buffer is None:
            self._buffer = torch.empty(self.numel, dtype=first.dtype, device=first.device)
        for p, offset in zip(self.params, self.offsets):
            view = self._buffer[offset:offset + p.numel()]
            if p.grad is None:
                view.zero_()
            else:
                grad = p.grad.to_dense() if p.grad.is_sparse else p.grad  # sparse_as_dense
                view.copy_(grad.reshape(-1))
        return self._buffer

    def unpack(self, reduced):
        """Writes each parameter's part of `reduced` into its gradient."""
        for p, offset in zip(self.params, self.offsets):
            part = reduced[offset:offset + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = part.clone()
            elif p.grad.is_sparse:
                p.grad = part.to_sparse()
            else:
                p.grad.copy_(part)


def form_buckets(params, names, cap_bytes):
    """Buckets of `params` (in the order every member agreed on), last first,
    each of one dtype and device and at most `cap_bytes`; a parameter of
    ALONE_BYTES or more, or larger than `cap_bytes`, gets a bucket of its own."""
    buckets, current, size = [], [], 0

    def close():
        nonlocal current, size
        if current:
            index = len(buckets)
            buckets.append(Bucket(index, current, f"DistributedOptimizer.bucket.{index}.{names[current[0]]}"))
        current, size = [], 0

    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and (p.dtype != current[0].dtype or p.device != current[0].device or size + nbytes > cap_bytes
                        or nbytes >= ALONE_BYTES):
            close()
        current.append(p)
        size += nbytes
        if nbytes >= ALONE_BYTES:
            close()
    close()
    return buckets
