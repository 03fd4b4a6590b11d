"""Shared-memory segments that a job's ranks left in /dev/shm.

A process set on one host makes a segment /dev/shm/hora-<uid>-<32 hex
digits>, and its members remove the name as soon as they have all mapped it
(src/transport/shm/). A member killed in between (SIGKILL, or a job stopped
while a set was being made) leaves the name behind. Before making a segment,
set rank 0 records "<name> <bytes>" in the job's store under a key ending
in "shm/segment" (or "-<why>" when the set has none), so the launcher that
hosts the store knows every name the job may have made. Once every local
rank has exited, nothing of the job can use those names any more and
horarun removes what is left of them. Names that the job did not record,
such as another job's segments, are never touched.
"""

import os
import re
import stat

SEGMENT_RECORD_SUFFIX = "shm/segment"
SEGMENT_DIRECTORY = "/dev/shm"


def _segment_name_pattern():
    return re.compile(rf"hora-{os.geteuid()}-[0-9a-f]{{32}}")


def recorded_segment_names(records):
    """The segment names in `records` (the values of the store's
    "shm/segment" keys, as bytes); records of sets without a segment and
    anything not shaped like one of this user's segment names are skipped."""
    pattern = _segment_name_pattern()
    names = []
    for record in records:
        name = record.decode("ascii", "replace").split(" ", 1)[0]
        if pattern.fullmatch(name):
            names.append(name)
    return names


def remove_segments(names, directory=SEGMENT_DIRECTORY):
    """Removes each of `names` from `directory` that is still there as a
    regular file of this user (never following a symlink); returns the names
    removed."""
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                continue
            os.unlink(path)
        except OSError:   # already gone, or not ours to remove
            continue
        removed.append(name)
    return removed
