"""Errors raised by hora.

Invalid arguments raise ``ValueError`` when the op is submitted. Errors found
while the op runs derive from ``HoraError`` (alias ``HorovodInternalError``):

- ``MismatchError``: members of the process set submitted ops that disagree
  (the message names the ranks and fields).
- ``TimeoutError``: an op or a rendezvous did not complete in time.
- ``PeerFailureError``: a peer of the process set died or became unreachable;
  the set is broken, other sets are not.
- ``InternalError``: a bug or unexpected condition inside hora.
"""

from hora._core import (  # noqa: F401
    HoraError,
    InternalError,
    MismatchError,
    PeerFailureError,
    TimeoutError,
)

HorovodInternalError = HoraError

__all__ = [
    "HoraError",
    "HorovodInternalError",
    "InternalError",
    "MismatchError",
    "PeerFailureError",
    "TimeoutError",
]
