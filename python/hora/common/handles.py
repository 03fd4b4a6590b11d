"""Handles of ops in flight, and ``poll`` / ``synchronize``.

A handle is returned by every ``*_async`` function at once, without waiting
for other members; ``poll`` tells whether the op has finished and
``synchronize`` waits for it and returns its result (or raises its error, a
``HorovodInternalError`` kind, on the caller's thread).
"""


import threading

# The buffers of ops whose handle was dropped while they ran (the core still
# reads and writes them): (work, buffers), released once the work is done.
_orphans_lock = threading.Lock()
_orphans = []


def release_finished_orphans():
    """Drops the buffers of orphaned ops that have finished (each submit calls it)."""
    if not _orphans:  # the common case, without taking the lock
        return
    with _orphans_lock:
        if _orphans:
            _orphans[:] = [(work, keep) for work, keep in _orphans if not work.finished()]


class Handle:
    """One op submitted to the core. Keeps the op's input and output alive
    until it is done, even when the handle itself is dropped first;
    ``finish(work)`` turns the finished work into the result, once."""

    __slots__ = ("_work", "_keep", "_finish", "_done", "_result")

    def __init__(self, work, keep, finish):
        self._work = work
        self._keep = keep
        self._finish = finish
        self._done = False
        self._result = None

    def __del__(self):
        try:
            # finished(), not ready(): a dropped handle has not seen its op
            # finish, so the op's name stays taken (docs/process_sets.md).
            if self._keep is not None and not self._work.finished():
                with _orphans_lock:
                    _orphans.append((self._work, self._keep))
        except Exception:  # interpreter shutdown: nothing runs any more
            pass

    def ready(self):
        return self._done or self._work.ready()

    def wait(self):
        if not self._done:
            self._work.wait()
            self._result = self._finish(self._work)
            self._done = True
            self._keep = None
        return self._result


class GroupHandle:
    """Several ops submitted together; their results come back as a list."""

    __slots__ = ("_handles",)

    def __init__(self, handles):
        self._handles = list(handles)

    def ready(self):
        return all(h.ready() for h in self._handles)

    def wait(self):
        return [h.wait() for h in self._handles]


class DerivedHandle:
    """A result computed from other handles' results once they finish.
    Calling it waits and returns the result, as Horovod's sparse allreduce
    handle does."""

    __slots__ = ("_handles", "_combine")

    def __init__(self, handles, combine):
        self._handles = list(handles)
        self._combine = combine

    def ready(self):
        return all(h.ready() for h in self._handles)

    def wait(self):
        return self._combine([h.wait() for h in self._handles])

    __call__ = wait


_HANDLE_TYPES = (Handle, GroupHandle, DerivedHandle)


def _checked(handle, what):
    if not isinstance(handle, _HANDLE_TYPES):
        raise ValueError(f"{what}() needs a handle returned by an *_async function, got {type(handle).__name__}")
    return handle


def poll(handle):
    """True when the op behind ``handle`` has finished (successfully or not);
    ``synchronize`` then returns without waiting. Never blocks."""
    return _checked(handle, "poll").ready()


def synchronize(handle):
    """Waits for the op behind ``handle`` and returns its result."""
    return _checked(handle, "synchronize").wait()
