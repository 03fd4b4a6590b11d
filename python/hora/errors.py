"""Errors raised by hora.

Invalid arguments raise ``ValueError`` when the op is submitted. Errors found
while the op runs derive from ``HoraError`` (alias ``HorovodInternalError``):

- ``MismatchError``: members of the process set submitted ops that disagree
  (the message names the ranks and fields).
- ``TimeoutError``: an op or a rendezvous did not complete in time.
- ``PeerFailureError``: a peer of the process set died or became unreachable;
  the set is broken, other sets are not.
- ``InternalError``: a bug or unexpected condition inside hora.

``UnsupportedOperationError`` is raised when an op is submitted that hora,
like Horovod, does not run (a reducescatter with a reduction other than Sum
or Average). It is a ``ValueError``, as every refusal of a caller's
arguments is, and a ``HorovodInternalError``, the type Horovod raises there.
"""

from hora._core import (  # noqa: F401
    HoraError,
    InternalError,
    MismatchError,
    PeerFailureError,
    TimeoutError,
)

HorovodInternalError = HoraError

# Tracebacks name them where users import them from.
for _error in (HoraError, InternalError, MismatchError, PeerFailureError, TimeoutError):
    _error.__module__ = __name__
del _error


class UnsupportedOperationError(ValueError, HoraError):
    """An op hora refuses when it is submitted, where Horovod raises a
    ``HorovodInternalError``; catching either type catches it."""


__all__ = [
    "HoraError",
    "HorovodInternalError",
    "InternalError",
    "MismatchError",
    "PeerFailureError",
    "TimeoutError",
    "UnsupportedOperationError",
]
