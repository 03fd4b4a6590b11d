"""Runs another worker with this rank claiming a host, as if the job ran on
two machines: HORA_HOST_IDENTITY is set from the rank before hora starts.
Arguments: the layout ("blocks": ranks 0, 1 on host a and 2, 3 on host b;
"interleaved": even ranks on host a, odd ones on host b), then the worker's
file name and its own arguments."""

import os
import runpy
import sys

RANK_VARIABLES = ("HORA_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
rank = next(int(os.environ[name]) for name in RANK_VARIABLES if name in os.environ)
layout, worker = sys.argv[1], sys.argv[2]
host = rank // 2 if layout == "blocks" else rank % 2
os.environ["HORA_HOST_IDENTITY"] = "host-" + "ab"[host]
sys.argv = [worker] + sys.argv[3:]
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), worker), run_name="__main__")
