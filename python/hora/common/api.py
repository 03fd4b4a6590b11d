"""The public names that every front end (hora.numpy, hora.torch,
hora.tensorflow, hora.tensorflow.keras, hora.keras, hora.mxnet) exports
unchanged, listed once: lifecycle and topology (``init``, ``rank``, ...),
build queries, process sets, Horovod's reduction constants,
``HorovodInternalError`` and the telemetry functions.

A front end re-exports them with ``from hora.common.api import *`` and
lists them in its ``__all__`` as ``api.__all__ + [its own names]``; what
takes a tensor (the collectives, ``broadcast_object``, optimizers) is the
front end's own.
"""

from hora.common import basics as _basics
from hora.common.basics import *  # noqa: F401,F403
from hora.common.core_types import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hora.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    comm_process_set_id,
    global_process_set,
    process_set_by_id,
    process_sets,
    remove_process_set,
)
from hora.common.telemetry import metrics, start_timeline, stop_timeline  # noqa: F401
from hora.errors import HorovodInternalError  # noqa: F401

__all__ = sorted(_basics.__all__ + [
    "Adasum", "Average", "Max", "Min", "Product", "Sum",
    "ProcessSet", "add_process_set", "comm_process_set_id", "global_process_set", "process_set_by_id",
    "process_sets", "remove_process_set",
    "metrics", "start_timeline", "stop_timeline",
    "HorovodInternalError",
])
