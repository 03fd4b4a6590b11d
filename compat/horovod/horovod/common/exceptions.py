"""Horovod's exception names (``horovod.common.exceptions``).

hora's runtime errors all derive from ``HorovodInternalError``
(``hora.errors.HoraError``). ``HostsUpdatedInterrupt`` and the version
mismatch error keep Horovod's signatures so that code catching or raising
them runs; hora itself raises neither (it has no elastic host updates yet
and no framework compiled in, so no version to mismatch).
"""

from hora.errors import HorovodInternalError  # noqa: F401


class HostsUpdatedInterrupt(RuntimeError):
    """The job's hosts changed (elastic training); ``skip_sync`` says whether
    the state may skip its synchronisation after the reset."""

    def __init__(self, skip_sync):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


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
