"""``horovod.common.util``: the helpers Horovod's tests and user code import,
answered for hora.

What was built: hora has one build for every framework (nothing is compiled
against one), always has Gloo, has MPI when it was built with it, and has no
NCCL, DDL, CCL or GPU support.
"""

import contextlib
import importlib.util
import os
import warnings

EXTENSIONS = ["tensorflow", "torch", "mxnet"]


def extension_available(ext_base_name, verbose=False):
    """Whether ``horovod.<ext_base_name>`` can run here: hora has a front end
    for it and the framework is installed."""
    available = (ext_base_name in EXTENSIONS and importlib.util.find_spec(ext_base_name) is not None
                 and importlib.util.find_spec(f"hora.{ext_base_name}") is not None)
    if verbose:
        print(f"Extension {ext_base_name} {'was' if available else 'was NOT'} built.")
    return available


def gpu_available(ext_base_name, verbose=False):
    """False: hora runs its collectives on CPU memory."""
    return False


def mpi_built(verbose=False):
    from hora import _core

    return bool(_core.mpi_built())


def gloo_built(verbose=False):
    return True


def nccl_built(verbose=False):
    return False


def ddl_built(verbose=False):
    return False


def ccl_built(verbose=False):
    return False


@contextlib.contextmanager
def env(**kwargs):
    """Sets the given environment variables (None values are skipped) for
    the ``with`` block, then restores what was there before."""
    updates = {name: value for name, value in kwargs.items() if value is not None}
    saved = {name: os.environ.get(name) for name in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def get_average_backwards_compatibility_fun(reduce_ops):
    """Returns ``impl(op, average)`` resolving Horovod's old ``average=``
    argument against ``op=``: both given is a ValueError; ``average`` alone
    warns and picks Average or Sum; neither gives Average."""

    def impl(op, average):
        if op is not None:
            if average is not None:
                raise ValueError("The op parameter supersedes average. Please provide only one of them.")
            return op
        if average is not None:
            warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                          DeprecationWarning)
            return reduce_ops.Average if average else reduce_ops.Sum
        return reduce_ops.Average

    return impl


def num_rank_is_power_2(num_rank):
    """Whether ``num_rank`` is a power of two (Adasum's requirement)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def split_list(items, n):
    """``items`` cut into ``n`` consecutive chunks whose lengths differ by at
    most one, the longer ones first."""
    size, extra = divmod(len(items), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(n)]


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True


def is_version_greater_equal_than(ver, target):
    """Whether version string ``ver`` >= ``target`` (major.minor.patch)."""
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"This function only accepts string arguments, got {ver!r} and {target!r}")
    if len(target.split(".")) != 3:
        raise ValueError(f"We only accepts target version values in the form of: major.minor.patch. "
                         f"Received: {target}")
    from packaging import version

    return version.parse(ver) >= version.parse(target)
