"""Framework adapters: how one framework's tensors reach the core, and the
registry that ``ProcessSet.allreduce(tensor)`` and friends dispatch through.

A front end (``hora.numpy``, ``hora.torch``, ...) implements one
``Adapter`` and registers it when it is imported, with the namespace of its
public collectives. Nothing here imports a framework.
"""

import threading


class Adapter:
    """The framework-specific half of every collective; ``hora.common.ops``
    is the other half. Subclasses implement each method for their tensors;
    none of them communicates, blocks or keeps state, so any thread may call
    them. Element types are named framework-neutrally ("float32",
    "bfloat16", ...; see ``hora.common.core_types.DATA_TYPES``).

    ``tensor_types`` are the framework's tensor types; dispatch sends them
    (and their subclasses), and ``other_inputs`` (types the adapter converts,
    such as Python lists), to this adapter. ``name`` is the framework's.
    """

    name = ""
    tensor_types = ()
    other_inputs = ()

    def check(self, tensor, what):
        """``tensor`` ready for the other methods (a front end may convert,
        e.g. a list to an array); ValueError naming ``what`` unless it is a
        tensor of this framework that lives where the core can read it."""
        raise NotImplementedError

    def dtype_name(self, tensor):
        """The element type's name; an unsupported type may have any name."""
        raise NotImplementedError

    def shape(self, tensor):
        """The shape as a tuple of ints."""
        raise NotImplementedError

    def buffer(self, tensor):
        """A C-contiguous view of ``tensor`` that the core reads (DLPack or
        the buffer protocol); a copy only when ``tensor`` is not contiguous."""
        raise NotImplementedError

    def empty(self, shape, like):
        """A fresh C-contiguous tensor of ``shape`` with ``like``'s element
        type; the core writes it through ``buffer``."""
        raise NotImplementedError

    def in_place_target(self, tensor, what):
        """``(buffer, result)`` for the in-place forms: the buffer the core
        writes and a function that makes ``tensor`` hold what it wrote and
        returns it. ValueError when ``tensor`` cannot be written."""
        raise NotImplementedError

    def from_core(self, array, dtype_name):
        """An output the core allocated (a NumPy array sharing the core's
        memory, bfloat16 carried as float16) as a tensor of ``dtype_name``,
        without a copy where the framework allows."""
        raise NotImplementedError

    def split_values(self, splits):
        """``(list of ints, kind)`` when ``splits`` is a tensor of this
        framework (ValueError for a non-integer or non-1-D one); None for
        anything else (a sequence of integers, which the caller reads).
        ``kind`` is passed back to ``received_splits``."""
        return None

    def received_splits(self, values, kind):
        """The splits an alltoall received, as this framework returns them;
        ``kind`` is what ``split_values`` gave, None for a plain sequence."""
        raise NotImplementedError


_lock = threading.Lock()
_registered = []  # (adapter, public collectives), in registration order


def register(adapter, collectives):
    """Makes ``collectives`` (an object or module with ``allreduce``,
    ``allgather``, ``broadcast``, ``alltoall`` and ``reducescatter``) handle
    the tensors of ``adapter.tensor_types`` for ``ProcessSet`` methods.
    A later registration for the same framework replaces the earlier one."""
    with _lock:
        _registered[:] = [entry for entry in _registered if entry[0].name != adapter.name]
        _registered.append((adapter, collectives))


def collectives_for(tensor):
    """The public collectives registered for ``tensor``'s type; ValueError
    when no loaded front end takes it."""
    with _lock:
        entries = list(_registered)
    for cls in type(tensor).__mro__:
        for adapter, collectives in entries:
            if cls in adapter.tensor_types or cls in adapter.other_inputs:
                return collectives
    loaded = ", ".join(f"hora.{adapter.name}" for adapter, _ in entries) or "none"
    kind = type(tensor)
    raise ValueError(f"no hora front end is loaded for a {kind.__module__}.{kind.__qualname__}; import the "
                     f"front end of its framework first (loaded front ends: {loaded})")
