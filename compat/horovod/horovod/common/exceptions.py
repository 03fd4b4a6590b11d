"""Horovod's exception names (``horovod.common.exceptions``).

hora's runtime errors all derive from ``HorovodInternalError``
(``hora.errors.HoraError``); ``HostsUpdatedInterrupt`` is the one hora's
elastic training raises (hora.common.elastic). The version mismatch error
keeps Horovod's signature so that code catching or raising it runs; hora
raises none (no framework is compiled in, so no version can mismatch).
"""

from hora.common.elastic import HostsUpdatedInterrupt  # noqa: F401
from hora.errors import HorovodInternalError  # noqa: F401


def get_version_mismatch_message(name, version, installed_version):
    """The message of HorovodVersionMismatchError."""
    return (f"Framework {name} installed with version {installed_version} but found version {version}.\n"
            "This can result in unexpected behavior including runtime errors.\n"
            "Reinstall Horovod using `pip install --no-cache-dir` to build with the new version.")


class HorovodVersionMismatchError(ImportError):
    """A framework's version at run time differs from the one Horovod was
    built against."""

    def __init__(self, name, version, installed_version):
        super().__init__(get_version_mismatch_message(name, version, installed_version))
        self.name = name
        self.version = version
        self.installed_version = installed_version
