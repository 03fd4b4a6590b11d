"""One rank of hora.spark.run: ``python -m hora.spark._child``, started by
its Spark task (_task.py). It dies with the task: on Linux the kernel sends
it SIGKILL when the task's process ends (PR_SET_PDEATHSIG), and a watcher
thread ends it wherever the parent changes (the task's process is gone).
Then it runs the function as a rank of hora.runner.run does (run_task.py).
"""

import ctypes
import os
import signal
import sys
import threading
import time

from hora.runner import run_task
from hora.spark._task import PARENT_VARIABLE

_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.5


def die_with_parent(parent):
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    def watch():
        while os.getppid() == parent:
            time.sleep(_WATCH_SECONDS)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)   # the task ended before the line above
    threading.Thread(target=watch, daemon=True, name="hora-spark-parent-watch").start()


def main():
    die_with_parent(int(os.environ[PARENT_VARIABLE]))
    return run_task.main()


if __name__ == "__main__":
    sys.exit(main())
