"""An elastic job's rounds as the driver (hora.runner.elastic) and its
workers (hora.common.elastic) share them: the store keys of each round and
the variables the driver gives each worker.

Round r lists the workers that take part and gives each its rank, size,
local and cross rank; the newest round's number is under ROUND_KEY.
"""

ROUND_KEY = "elastic/round"          # the newest round, decimal
ENVIRONMENT_FLAG = "HORA_ELASTIC"    # "1" in a worker of an elastic job
WORKER_VARIABLE = "HORA_WORKER_ID"   # host:slot, stable for the worker's life
TIMEOUT_VARIABLE = "HORA_ELASTIC_TIMEOUT"
# A worker's coordinates in a round, in the order an assignment lists them.
COORDINATES = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")


def joined_key(worker):
    """The round worker `worker` joined last (it sets it as it joins)."""
    return f"elastic/joined/{worker}"


def assignment_key(round_):
    """Round `round_`'s worker -> [rank, size, local rank, local size, cross rank, cross size]."""
    return f"elastic/round.{round_}/ranks"
