"""Handing one op to the core: ``enqueue``, and ``run`` for a caller that
waits for it at once, below process sets and the collectives
(hora.common.process_sets resolves a set to its id first). Any thread;
``enqueue`` never blocks unless ``caller_waits``."""

import numbers
import operator

from hora import _core
from hora.common import core_types as _types
from hora.common.handles import Handle, release_finished_orphans


def integer(value, what):
    """``value`` as an int; ValueError for anything that is not an integer."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


def real_number(value, what):
    if type(value) is float:  # the common case, without the slower ABC check below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a real number, got {value!r}")
    return float(value)


def checked_arguments(name, root, prescale, postscale):
    """(name, root, prescale, postscale) of an op as the core takes them;
    ValueError naming the argument that is not one."""
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name must be a string or None, got {type(name).__name__}")
    return name, integer(root, "root_rank"), real_number(prescale, "prescale_factor"), \
        real_number(postscale, "postscale_factor")


def enqueue(op, source, output, name, set_id, finish, reduce_op=_types.Sum, root=0, prescale=1.0, postscale=1.0,
            splits=(), caller_waits=False):
    """Hands one op on set ``set_id`` to the core and returns its handle; the
    arguments are checked already (``checked_arguments``). ``source`` and
    ``output`` are buffers the core reads and writes (output None: the core
    allocates it); ``finish(work)`` makes the result once it is done.
    ``caller_waits``: the caller synchronizes at once, so the op may run on
    this thread before the handle is returned (no hand-off to the set's
    engine thread)."""
    release_finished_orphans()
    work = _core.enqueue(set_id, op, name or "", source, output, _types.core_reduce_op(reduce_op), root,
                         prescale, postscale, list(splits), caller_waits)
    return Handle(work, (source, output), finish)


def run(op, source, output, name, set_id, reduce_op=_types.Sum, root=0, prescale=1.0, postscale=1.0):
    """Runs one op on set ``set_id`` on this thread (the core's caller-waits
    path: no hand-off to the set's engine thread) and returns its work once
    it has finished; raises the op's error. As ``enqueue``, but no handle:
    ``source`` and ``output`` stay alive in the caller's frame, and the
    caller makes the result."""
    release_finished_orphans()
    work = _core.enqueue(set_id, op, name or "", source, output, _types.core_reduce_op(reduce_op), root,
                         prescale, postscale, [], True)
    work.wait()
    return work
