"""mpi4py interop: ``init(comm=...)``, ``ProcessSet(comm)`` and a set's
``mpi_comm``, with Horovod's meaning.

mpi4py is imported only when a communicator is used. Communicators reach the
core as Fortran handles (``comm.py2f()``), which every MPI implementation
converts back (``MPI_Comm_f2c``).
"""

from hora.common.session import session


def is_communicator(obj):
    """Whether ``obj`` is an mpi4py communicator (without importing mpi4py)."""
    return any(cls.__module__.startswith("mpi4py") and cls.__name__ == "Comm" for cls in type(obj).__mro__)


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ValueError(f"MPI communicators need mpi4py: {error}") from None
    return MPI


def world_arguments(comm):
    """``init(comm=...)`` as the core takes it: (Fortran handle or None,
    list of MPI_COMM_WORLD ranks)."""
    if comm is None:
        return None, []
    if is_communicator(comm):
        if comm == _mpi().COMM_NULL:
            raise ValueError("init(comm=...) got MPI.COMM_NULL")
        return comm.py2f(), []
    try:
        ranks = [int(r) for r in comm]
    except TypeError:
        raise ValueError("comm must be an mpi4py communicator or a list of ranks of MPI_COMM_WORLD, "
                         f"got {comm!r}") from None
    if not ranks:
        raise ValueError("init(comm=[]) needs at least one rank")
    return None, ranks


def on_init(comm):
    """Remembers what the job's world is, for ProcessSet(comm)."""
    session.mpi_world = comm


def on_shutdown():
    session.mpi_world = None


def _world_group():
    """The group of the job's world (local: no communication)."""
    MPI, world = _mpi(), session.mpi_world
    if is_communicator(world):
        return world.Get_group()
    group = MPI.COMM_WORLD.Get_group()
    if world is None:
        return group
    try:
        return group.Incl(sorted(world))
    finally:
        group.Free()


def world_size():
    """The number of ranks in the job's world (local: no communication)."""
    group = _world_group()
    try:
        return group.Get_size()
    finally:
        group.Free()


def _world_communicator():
    """The job's world as a communicator. Collective over the world when
    init(comm=[ranks]) was given, so only init calls it."""
    MPI, world = _mpi(), session.mpi_world
    if is_communicator(world):
        return world
    if world is None:
        return MPI.COMM_WORLD
    group = _world_group()
    try:
        return MPI.COMM_WORLD.Create_group(group)
    finally:
        group.Free()


def communicator_ranks(comm):
    """The hora ranks (ranks in the job's world) of ``comm``'s members."""
    MPI = _mpi()
    if comm == MPI.COMM_NULL:
        raise ValueError("ProcessSet(MPI.COMM_NULL): this rank holds no communicator")
    world_group = _world_group()
    group = comm.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world_group)
    finally:
        group.Free()
        world_group.Free()
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError("the communicator has members outside the job that hora was started on")
    return sorted(ranks)


def agree_initial_sets(rank_lists):
    """``init(process_sets=...)`` with communicators among them: each rank may
    hold different sets (a Split gives each rank its own part). Gathers every
    rank's list and numbers the distinct sets in order of position, then of
    rank, as Horovod does; a set equal to the whole world is the global set.
    Returns (the core's initial sets, this rank's set ids)."""
    comm = _world_communicator()
    everyone = comm.allgather(rank_lists)
    world = list(range(comm.Get_size()))
    numbered = {tuple(world): 0}
    ordered = []
    for position in range(max(len(lists) for lists in everyone)):
        for lists in everyone:
            if position < len(lists) and tuple(lists[position]) not in numbered:
                numbered[tuple(lists[position])] = len(ordered) + 1
                ordered.append(list(lists[position]))
    return ordered, [numbered[tuple(ranks)] for ranks in rank_lists]
