"""``horovod.torch.optimizer`` on hora."""

from hora.torch.optimizer import DistributedOptimizer  # noqa: F401
