"""``horovod.torch.sync_batch_norm`` on hora."""

from hora.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
