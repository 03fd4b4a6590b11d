"""Horovod's package names on top of hora (the hora-horovod compatibility
package). ``import horovod.torch as hvd`` gives ``hora.torch``."""

import importlib.metadata as _metadata


def _refuse_to_shadow_horovod():
    try:
        real = _metadata.distribution("horovod")
    except _metadata.PackageNotFoundError:
        return
    raise ImportError(
        f"a real Horovod installation (distribution 'horovod' {real.version}, in {real.locate_file('')}) is "
        "present; hora's compatibility package 'hora-horovod' refuses to shadow it. Use one of them: "
        "`pip uninstall horovod` to run Horovod scripts on hora, or `pip uninstall hora-horovod` to use Horovod.")


_refuse_to_shadow_horovod()

# The Horovod release whose API this package provides.
__version__ = "0.28.1"
