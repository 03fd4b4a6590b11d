"""Stops a job's ranks if horarun dies without stopping them (SIGKILL, crash).

horarun starts this as a plain script in its own session and writes to its
stdin one line per rank: the rank's process group id. When horarun finishes
normally it writes 'done'. If stdin reaches end of file without 'done',
horarun is gone: every listed process group gets SIGTERM, then SIGKILL after a
grace period. Standard library only, so it starts without importing hora.
"""

import os
import signal
import sys
import time

GRACE_SECONDS = 3.0


def _alive(group):
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _signal_all(groups, signum):
    for group in groups:
        try:
            os.killpg(group, signum)
        except (ProcessLookupError, PermissionError):
            pass


def stop_groups(groups, grace=GRACE_SECONDS):
    """SIGTERM to every group, SIGKILL to those still alive after `grace`."""
    _signal_all(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        time.sleep(0.05)
    _signal_all([g for g in groups if _alive(g)], signal.SIGKILL)


def main():
    # A Ctrl-C meant for horarun must not end the watch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups = []
    for line in sys.stdin:
        line = line.strip()
        if line == "done":
            return 0
        if line.isdigit():
            groups.append(int(line))
    stop_groups(groups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
