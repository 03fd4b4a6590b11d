"""Horovod's exception names. hora's runtime errors all derive from
``HorovodInternalError`` (``hora.errors.HoraError``)."""

from hora.errors import HorovodInternalError  # noqa: F401
