"""``horovod.torch.elastic`` is ``hora.torch.elastic``."""

from hora.torch.elastic import (  # noqa: F401
    ElasticProcessSet,
    ElasticSampler,
    HostsUpdatedInterrupt,
    ObjectState,
    Parts,
    State,
    TorchState,
    run,
)
