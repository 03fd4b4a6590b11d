"""Process sets: subsets of the job's ranks that run collectives together.

Creating, using and removing a set involves only its members: a set is
registered with the core on first use by a member (or eagerly with
``add_process_set``), and non-members never block on it.
"""

import operator
import threading

from hora import _core
from hora.common import adapters as _adapters
from hora.common import core_types as _types
from hora.common import mpi as _mpi
from hora.common.handles import synchronize
from hora.common.session import session
from hora.common.submission import enqueue


class ProcessSet:
    """A set of ranks that run collective operations together.

    ``ProcessSet(ranks)`` takes any iterable of integer ranks (a list, a
    ``range``, NumPy integers), or an mpi4py communicator, whose members form
    the set (``mpi_comm`` keeps it; its ranks are known once hora is
    initialized). Pass it to ``init(process_sets=...)`` or
    ``add_process_set``, or just use it: its members register it on first use.
    """

    ranks = None
    mpi_comm = None
    # The id on a member (or any rank, for the global and initial sets).
    _id = None
    # A non-member's add_process_set: (ranks, generation) names the set in
    # the core; its id is read on first use of process_set_id.
    _non_member_key = None
    _non_member_id = None

    def __init__(self, ranks_or_comm):
        self._removed_id = None
        if _mpi.is_communicator(ranks_or_comm):
            self.mpi_comm = ranks_or_comm
            if _core.is_initialized():
                self.ranks = _mpi.communicator_ranks(ranks_or_comm)
            return
        self.ranks = validated_ranks(ranks_or_comm)

    def size(self):
        """Number of ranks in the set."""
        return None if self.ranks is None else len(self.ranks)

    def rank(self):
        """This process's rank within the set, or -1 if it is not a member."""
        me = _core.rank()
        return self.ranks.index(me) if self.ranks and me in self.ranks else -1

    def included(self):
        """Whether this process is a member of the set."""
        return self.ranks is not None and _core.rank() in self.ranks

    @property
    def process_set_id(self):
        """The set's id: the same on every rank that added it. On a rank that
        added the set without being a member, the first read waits (up to the
        op timeout) until the set's lowest member has published it."""
        if self._id is not None or self._non_member_key is None:
            return self._id
        if self._non_member_id is None:
            ranks, generation = self._non_member_key
            self._non_member_id = _core.process_set_id(ranks, generation)
            session.sets_by_id.setdefault(self._non_member_id, self)
        return self._non_member_id

    @process_set_id.setter
    def process_set_id(self, value):
        self._id = value
        self._non_member_key = self._non_member_id = None

    def invalidate(self):
        if self._id is not None:
            self._removed_id = self._id
        self.process_set_id = None

    def __str__(self):
        # Never waits: a non-member's id not read yet shows as None.
        known_id = self._id if self._id is not None else self._non_member_id
        return f"ProcessSet(process_set_id={known_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__

    # Collectives on this set; they dispatch on the tensor's type to the
    # front end registered for it (hora.common.adapters).
    def allreduce(self, tensor, *args, **kwargs):
        return _adapters.collectives_for(tensor).allreduce(tensor, *args, process_set=self, **kwargs)

    def allgather(self, tensor, *args, **kwargs):
        return _adapters.collectives_for(tensor).allgather(tensor, *args, process_set=self, **kwargs)

    def broadcast(self, tensor, root_rank, *args, **kwargs):
        return _adapters.collectives_for(tensor).broadcast(tensor, root_rank, *args, process_set=self, **kwargs)

    def alltoall(self, tensor, *args, **kwargs):
        return _adapters.collectives_for(tensor).alltoall(tensor, *args, process_set=self, **kwargs)

    def reducescatter(self, tensor, *args, **kwargs):
        return _adapters.collectives_for(tensor).reducescatter(tensor, *args, process_set=self, **kwargs)

    def barrier(self):
        """Returns once every member of the set has called it."""
        barrier(self)


def validated_ranks(ranks_or_comm):
    """The sorted ranks of ``ProcessSet(ranks_or_comm)``; ValueError naming
    the set and the bad rank when one is not an integer, is negative, appears
    twice, or (once hora is initialized) is outside the job, and when there
    is none. Every rank checks, members or not."""
    try:
        if isinstance(ranks_or_comm, (str, bytes)):
            raise TypeError
        given = list(ranks_or_comm)
    except TypeError:
        raise ValueError("ProcessSet should be initialized with an iterable of integer ranks or an mpi4py "
                         f"communicator, got {ranks_or_comm!r}") from None
    named = f"ProcessSet({given!r})"
    ranks = []
    for r in given:
        try:
            if isinstance(r, bool):
                raise TypeError
            ranks.append(operator.index(r))
        except TypeError:
            raise ValueError(f"{named}: rank {r!r} is not an integer; a process set takes integer ranks") from None
    if not ranks:
        raise ValueError(f"{named}: a process set needs at least one rank")
    for r in ranks:
        if r < 0:
            raise ValueError(f"{named}: rank {r} is negative; ranks of a process set must be >= 0")
    if len(set(ranks)) != len(ranks):
        dup = next(r for r in ranks if ranks.count(r) > 1)
        raise ValueError(f"{named}: rank {dup} appears more than once")
    if _core.is_initialized():
        check_in_job(ranks, _core.size(), named)
    return sorted(ranks)


def check_in_job(ranks, size, named=None):
    """ValueError naming the set unless every rank is below ``size``."""
    for r in ranks:
        if r >= size:
            raise ValueError(f"{named or f'process set {ranks}'}: rank {r} is out of range for a job of "
                             f"size {size} (valid ranks are 0..{size - 1})")


# The global set is the one set without ranks of its own until init.
global_process_set = ProcessSet.__new__(ProcessSet)
global_process_set._removed_id = None
global_process_set.ranks = []
global_process_set.process_set_id = 0

session.forget_sets(global_process_set)

# session.added_sets: the sets init() and add_process_set made on this rank,
# members' and non-members' alike, by their ranks: as on Horovod, no second
# set with the same ranks may be added while one exists (sets first used
# without being added are not counted: only their members know of them).


def check_initial_sets(rank_lists, world_size=None):
    """ValueError naming the entry of ``init(process_sets=...)`` that
    duplicates an earlier entry (the same ranks in any order) or, once the
    job's size is known, the global set or has a rank outside the job."""
    seen = {}
    for index, ranks in enumerate(rank_lists):
        entry = f"init(process_sets=...): entry number {index}, process set {ranks},"
        if world_size is not None:
            check_in_job(ranks, world_size, entry[:-1])
            if list(ranks) == list(range(world_size)):
                raise ValueError(f"{entry} is a duplicate of the global process set (every rank of the job); "
                                 "use hvd.global_process_set")
        if tuple(ranks) in seen:
            raise ValueError(f"{entry} is a duplicate of entry number {seen[tuple(ranks)]}; "
                             "duplicate process sets are not allowed")
        seen[tuple(ranks)] = index


def adopt_existing_sets(sets):
    """``init(process_sets=sets)`` once hora is initialized: each set takes
    the id of the set with its ranks that init() or add_process_set made."""
    for ps in sets:
        _resolve_communicator(ps)
    check_initial_sets([ps.ranks for ps in sets], _core.size())
    for index, ps in enumerate(sets):
        existing = session.added_sets.get(tuple(ps.ranks))
        if existing is None:
            raise ValueError(f"init(process_sets=...): hora is already initialized and has no process set "
                             f"{ps.ranks} (entry number {index}); add it with add_process_set")
        if existing is not ps:
            ps.process_set_id = existing.process_set_id


def _check_not_added(ranks):
    if ranks == global_process_set.ranks:
        raise ValueError(f"Attempted to add a duplicate process set: {ranks} are all ranks of the job, the "
                         "global process set (hvd.global_process_set)")
    existing = session.added_sets.get(tuple(ranks))
    if existing is not None:
        raise ValueError(f"Attempted to add a duplicate process set: {existing} exists with the ranks "
                         f"{ranks}; remove it first or keep using it")


def _forget(ps):
    if isinstance(ps, ProcessSet) and ps.ranks is not None and session.added_sets.get(tuple(ps.ranks)) is ps:
        del session.added_sets[tuple(ps.ranks)]


def _on_init(initial_sets, ids, world_comm=None):
    """``initial_sets[i]`` got id ``ids[i]`` (0: it is the global set)."""
    global_process_set.ranks = list(range(_core.size()))
    global_process_set.mpi_comm = world_comm
    for ps, set_id in zip(initial_sets, ids):
        ps.process_set_id = set_id
        ps._removed_id = None
        session.sets_by_id.setdefault(set_id, ps)
    # Initial sets that this rank did not pass (another part of a Split).
    for set_id in _core.process_set_ids():
        if set_id not in session.sets_by_id:
            ps = ProcessSet(_core.process_set(set_id)[1])
            ps.process_set_id = set_id
            session.sets_by_id[set_id] = ps
    for set_id, ps in session.sets_by_id.items():
        if set_id != 0:
            session.added_sets.setdefault(tuple(ps.ranks), ps)


def _on_shutdown():
    for pid, ps in list(session.sets_by_id.items()):
        if pid != 0:
            ps.process_set_id = None
    for ps in list(session.sets_awaiting_id):
        ps.process_set_id = None
    session.forget_sets(global_process_set)
    global_process_set.mpi_comm = None


def _register(ps, first_use=False):
    """Registers ``ps`` with the core; ``first_use``: a member's first op on
    a set it never added (counted apart from added sets, see
    docs/process_sets.md, "Ids")."""
    set_id, _, _, generation = _core.add_process_set(ps.ranks, first_use)
    ps._removed_id = None
    if set_id >= 0:
        ps.process_set_id = set_id
        session.sets_by_id[set_id] = ps
    else:
        ps.process_set_id = None
        ps._non_member_key = (list(ps.ranks), generation)
        session.sets_awaiting_id.add(ps)
    return ps


def _is_non_members_set(ps):
    return ps._non_member_key is not None


def _first_use_lock(ranks):
    """The lock under which a set over ``ranks`` is registered on first use,
    so that threads using it first at the same time register it once (twice
    would count two sets, and the members' ids would differ)."""
    with session.first_use_locks_guard:
        return session.first_use_locks.setdefault(tuple(ranks), threading.Lock())


def resolve(process_set):
    """The core id of ``process_set``, registering it on a member's first use."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set._id is not None:
        return process_set._id
    if process_set._removed_id is not None:
        raise ValueError(f"process set {process_set._removed_id} has been removed; create a new ProcessSet")
    if not _core.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")
    _resolve_communicator(process_set)
    check_in_job(process_set.ranks, _core.size())
    if not process_set.included():
        raise ValueError(f"rank {_core.rank()} is not a member of process set {process_set.ranks}")
    with _first_use_lock(process_set.ranks):
        if process_set._id is not None:
            return process_set._id
        return _register(process_set, first_use=True).process_set_id


def _resolve_communicator(process_set):
    """Fills in the ranks of a set made from a communicator before init."""
    if process_set.ranks is None and process_set.mpi_comm is not None:
        process_set.ranks = _mpi.communicator_ranks(process_set.mpi_comm)


def add_process_set(process_set):
    """Registers a set now instead of on first use; returns it.

    Only members block, until the set's lowest member has called it.
    Non-members get the set back at once; reading its ``process_set_id``
    later waits for the id the members agreed on. Accepts a ``ProcessSet`` or
    a list of ranks. As on Horovod, a set with the ranks of the global set or
    of a set that init() or add_process_set made (and that was not removed)
    is refused with ValueError, on members and non-members alike.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set._id is not None or _is_non_members_set(process_set):
        raise ValueError(f"{process_set} is already registered")
    if not _core.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")
    _resolve_communicator(process_set)
    check_in_job(process_set.ranks, _core.size(), str(process_set))
    _check_not_added(process_set.ranks)
    _register(process_set)
    session.added_sets[tuple(process_set.ranks)] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a set (a ``ProcessSet`` or its id); True if it was removed.

    Members wait for each other. A rank that added the set without being a
    member forgets it at once (True, as on Horovod, where every rank takes
    part). The global set is never removed (False). The removed object raises
    on later use; its id is never given out again.
    """
    if isinstance(process_set, ProcessSet):
        if _is_non_members_set(process_set):
            session.sets_by_id.pop(process_set._non_member_id, None)
            _forget(process_set)
            process_set.invalidate()
            return True
        set_id = process_set._id
    elif isinstance(process_set, bool):
        raise ValueError("remove_process_set needs a ProcessSet or its integer id, got bool")
    else:
        try:
            set_id = operator.index(process_set)
        except TypeError:
            raise ValueError("remove_process_set needs a ProcessSet or its integer id, got "
                             f"{type(process_set).__name__}") from None
    if set_id is None or set_id == 0:
        return False
    known = session.sets_by_id.get(set_id)
    if known is not None and _is_non_members_set(known):
        return remove_process_set(known)
    if session.monitor_publisher is not None:
        session.monitor_publisher.keep_removed(set_id)
    removed = _core.remove_process_set(set_id)
    ps = session.sets_by_id.pop(set_id, None)
    for obj in (ps, process_set):
        if isinstance(obj, ProcessSet):
            _forget(obj)
            obj.invalidate()
    return removed


def comm_process_set_id(comm):
    """The id of the registered set whose members are those of mpi4py
    communicator ``comm`` (0 for the whole job); ValueError if none is."""
    ranks = _mpi.communicator_ranks(comm)
    if ranks == global_process_set.ranks:
        return 0
    for set_id, ps in sorted(session.sets_by_id.items()):
        if ps.ranks == ranks:
            return set_id
    raise ValueError(f"no registered process set has the ranks {ranks} of this communicator")


def process_set_by_id(process_set_id):
    if process_set_id not in session.sets_by_id:
        raise ValueError(f"No known process set with id {process_set_id}")
    return session.sets_by_id[process_set_id]


def process_sets():
    return [session.sets_by_id[i] for i in sorted(session.sets_by_id)]


def barrier(process_set=None):
    """Returns once every member of ``process_set`` (None: the global set)
    has called it."""
    set_id = resolve(process_set)
    synchronize(enqueue(_types.BARRIER, bytearray(), None, None, set_id, lambda work: None, caller_waits=True))
