"""Process sets, as ``horovod.common.process_sets`` names them."""

from hora.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
