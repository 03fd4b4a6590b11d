"""SyncBatchNorm: batch normalization with statistics over a process set.

In training, the mean and variance are those of the batch formed by every
member's input together, so the result on each member equals what
``BatchNorm`` gives that member's rows of the whole batch. Unlike Horovod's,
it runs on CPU tensors (with plain tensor arithmetic) and takes
``process_set=``.
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hora.common.ops import Sum
from hora.common.process_sets import global_process_set
from hora.torch import mpi_ops as _mpi_ops


def _channel_view(x, ndim):
    """Reshapes a per-channel vector to broadcast against an (N, C, ...) input."""
    return x.view((1, -1) + (1,) * (ndim - 2))


class SyncBatchNorm(_BatchNorm):
    """Applies batch normalization over an N-dimensional input (N >= 2) with
    statistics synchronized over ``process_set``.

    Arguments are those of ``torch.nn.BatchNorm1d/2d/3d``. Running statistics
    are updated identically on every member. In eval mode (with running
    statistics) nothing is communicated.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = global_process_set if process_set is None else process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        if self.process_set.size() == 1:
            return self._run_bn(input)
        if self.momentum is None:
            momentum = 1.0 / float(self.num_batches_tracked) if self.track_running_stats else 0.0
        else:
            momentum = self.momentum
        running = self.training and self.track_running_stats
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias,
                                            self.running_mean if running else None,
                                            self.running_var if running else None,
                                            self.eps, momentum, self.process_set)


class _SyncBatchNormFunction(torch.autograd.Function):
    """Forward: every member's (count, mean, biased variance) per channel are
    allgathered and merged. Backward: the per-channel sums of the gradient and
    of gradient * (x - mean) are summed over the set; weight and bias get
    this member's share (the optimizer reduces them)."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        x = input.contiguous()
        dims = [d for d in range(x.dim()) if d != 1]
        count = x.numel() // x.size(1)
        local_mean = x.mean(dims)
        local_var = x.var(dims, unbiased=False) if count > 0 else torch.zeros_like(local_mean)
        stats = torch.cat([torch.tensor([float(count)], dtype=x.dtype), local_mean, local_var]).unsqueeze(0)
        gathered = _mpi_ops.synchronize(_mpi_ops.allgather_async(stats, "sync_batch_norm.stats", process_set))
        channels = x.size(1)
        counts = gathered[:, :1]
        means = gathered[:, 1:1 + channels]
        variances = gathered[:, 1 + channels:]
        total = counts.sum()
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got {int(total)}")
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean * momentum)
                running_var.mul_(1 - momentum).add_(var * (total / (total - 1)) * momentum)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total = total
        ctx.process_set = process_set
        out = (x - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            out = out * _channel_view(weight, x.dim()) + _channel_view(bias, x.dim())
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        dy = grad_output.contiguous()
        dims = [d for d in range(x.dim()) if d != 1]
        xmu = x - _channel_view(mean, x.dim())
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_weight = (sum_dy_xmu * invstd) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy if weight is not None and ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            sums = _mpi_ops.synchronize(_mpi_ops.allreduce_async(torch.cat([sum_dy, sum_dy_xmu]), op=Sum,
                                                                 name="sync_batch_norm.sums",
                                                                 process_set=ctx.process_set))
            channels = x.size(1)
            mean_dy = sums[:channels] / ctx.total
            mean_dy_xmu = sums[channels:] / ctx.total
            scale = invstd if weight is None else invstd * weight
            grad_input = (dy - _channel_view(mean_dy, x.dim())
                          - xmu * _channel_view(invstd * invstd * mean_dy_xmu, x.dim())) * _channel_view(scale, x.dim())
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
