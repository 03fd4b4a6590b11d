"""``horovod.ray`` on hora: ``RayExecutor`` runs a job on Ray actors, one per
rank (``hora.ray.RayExecutor``); ``ElasticRayExecutor`` runs an elastic one
(``hora.ray.elastic``)."""

from hora.ray import RayExecutor  # noqa: F401
from hora.ray import Worker as BaseHorovodWorker  # noqa: F401
from hora.ray.elastic import ElasticRayExecutor  # noqa: F401
