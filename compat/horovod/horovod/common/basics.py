"""``horovod.common.basics``: ``HorovodBasics``, the object a framework's
``mpi_ops`` module holds as ``_basics`` (Horovod's tests call its methods)."""

from hora.common import process_sets as _process_sets


class HorovodBasics:
    """The basics of one hora front end (``hora.torch``, ...) as methods:
    ``init``, ``rank``, ``size``, ``mpi_built`` and the rest are the front
    end's own; ``_get_process_set_ids_and_ranks`` answers from the sets this
    rank knows. Holds no state of its own."""

    def __init__(self, front_end):
        self._front_end = front_end

    def __getattr__(self, name):
        return getattr(self._front_end, name)

    def _get_process_set_ids_and_ranks(self):
        """{id: sorted ranks} of every process set this rank knows: the
        global set, the sets given to init() and those it added or used.
        (On Horovod every rank knows every set; on hora a set added only by
        its members is not known to the other ranks.)"""
        return {ps.process_set_id: list(ps.ranks) for ps in _process_sets.process_sets()
                if ps.process_set_id is not None}
