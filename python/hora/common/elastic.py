"""Elastic training, framework-free: Horovod's ``hvd.elastic`` model on hora.

A job started by ``horarun --min-np/--max-np/--host-discovery-script``
runs workers, not fixed ranks. The driver (``hora.runner.elastic``) numbers
its rendezvous *rounds*: round r lists the workers that take part and gives
each its rank, size, local and cross rank. ``hvd.init()`` in such a worker
joins the newest round that includes it; after a failure or when workers
were added, ``run`` shuts hora down and joins the next round.

The training function and its state (docs/elastic.md has the whole model):

- ``run(func)``: calls ``func(state, ...)``; a ``HorovodInternalError`` (a
  collective failed: a peer died) restores the state's last commit, a
  ``HostsUpdatedInterrupt`` (workers were added or removed) keeps it; either
  way hora is re-initialised in the next round, the reset callbacks run, the
  state is synchronised and ``func`` is called again.
- ``State``: ``commit()`` saves and checks for new rounds, ``restore()``
  goes back to the last commit, ``sync()`` makes every member equal to the
  one that holds the newest commit. A state may belong to a process set
  (``ElasticProcessSet``): it then commits, restores and synchronises among
  that set's members only, and a failure elsewhere never rolls it back.
- ``ElasticProcessSet(spec)``: a set re-made in every round from ``spec``:
  a list of ranks, a function of the round's world size returning ranks
  (``lambda size: range(0, size, 2)``), or ``Parts(k, i)``, the i-th of k
  nearly equal parts of the world.
"""

import copy

from hora import _core
from hora.common import basics as _basics
from hora.common import objects as _objects
from hora.common import process_sets as _process_sets
from hora.common.core_types import Max
from hora.common.elastic_rounds import current_round, newest_round  # noqa: F401
from hora.common.session import session
from hora.errors import HorovodInternalError, PeerFailureError  # noqa: F401
from hora.runner.rounds import ROUND_KEY, assignment_key, joined_key  # noqa: F401

# hvd.elastic's framework-free names; each front end's elastic module
# re-exports them and adds its states.
__all__ = ["ElasticProcessSet", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "Parts", "State",
           "broadcast_object", "current_round", "remake_sets", "run"]


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by ``State.commit()``/``check_host_updates()`` on every member
    of the state's set at the same step when the driver has started a newer
    round (workers were added or removed). ``skip_sync`` is Horovod's: True
    when workers were only removed, so the members already hold equal state."""

    def __init__(self, skip_sync=False):
        super().__init__("the elastic job's workers changed")
        self.skip_sync = skip_sync


def in_elastic_job():
    """Whether this process is a worker of an elastic job (and hora runs)."""
    return session.config is not None and session.config.elastic


class Parts:
    """The `index`-th of `count` nearly equal parts of the world (the first
    ``size % count`` parts have one rank more), in rank order."""

    def __init__(self, count, index):
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"Parts({count}, {index}): need count >= 1 and 0 <= index < count")
        self.count, self.index = count, index

    def __call__(self, size):
        base, extra = divmod(size, self.count)
        start = self.index * base + min(self.index, extra)
        return range(start, start + base + (1 if self.index < extra else 0))

    def __repr__(self):
        return f"Parts({self.count}, {self.index})"


def evaluate_spec(spec, size):
    """The sorted ranks `spec` gives for a world of `size` ranks; raises
    ValueError naming the spec when they are not ranks of that world."""
    ranks = spec(size) if callable(spec) else spec
    try:
        ranks = sorted({int(r) for r in ranks})
    except (TypeError, ValueError):
        raise ValueError(f"process set spec {spec!r} gave {ranks!r} for world size {size}, "
                         "not a collection of ranks") from None
    outside = [r for r in ranks if not 0 <= r < size]
    if outside:
        raise ValueError(f"process set spec {spec!r} gives rank(s) {outside} outside the world of {size} ranks")
    return ranks


class ElasticProcessSet:
    """A process set re-made from `spec` in every round (see the module).
    Between rounds it stands for the set of the round this process joined
    last: ``process_set`` is that hora ProcessSet (None in a round where
    the spec gives no ranks), and ``included()``, ``rank()``, ``size()``
    and ``ranks`` answer for it. A set is made anew each round, with a new
    id; ids are never reused."""

    def __init__(self, spec, name=None):
        if not callable(spec):
            evaluate_spec(spec, max(spec, default=-1) + 1)   # a plain list: checked now
        self.spec = spec
        self.name = name or repr(spec)
        self.process_set = None
        self._round = None
        session.elastic_sets.append(self)

    def _remake(self, round_):
        if self._round == round_:
            return
        ranks = evaluate_spec(self.spec, _core.size())
        self.process_set = _process_sets.add_process_set(ranks) if ranks else None
        self._round = round_

    def _current(self):
        """The set of the round joined last, made on first use in a round."""
        if self._round != session.joined_round and _core.is_initialized():
            self._remake(session.joined_round)
        return self.process_set

    @property
    def ranks(self):
        current = self._current()
        return None if current is None else list(current.ranks)

    def included(self):
        current = self._current()
        return current is not None and current.included()

    def rank(self):
        return self.process_set.rank() if self.included() else -1

    def size(self):
        current = self._current()
        return 0 if current is None else current.size()

    def __repr__(self):
        return f"ElasticProcessSet({self.name}, round {self._round}: {self.ranks})"


def remake_sets():
    """Makes every ElasticProcessSet of this process for the current round
    (in the order they were declared, on every worker alike)."""
    for elastic_set in session.elastic_sets:
        elastic_set._remake(session.joined_round)


def _resolved(process_set):
    """The hora ProcessSet a State works in (the global set by default)."""
    if process_set is None:
        return _process_sets.global_process_set
    if isinstance(process_set, ElasticProcessSet):
        if process_set._round != session.joined_round:
            process_set._remake(session.joined_round)
        if not process_set.included():
            raise ValueError(f"this rank is not a member of {process_set!r} in round {session.joined_round}; a state "
                             "bound to it is used by its members only")
        return process_set.process_set
    return process_set


class State:
    """What training must keep across a reset (Horovod's ``State``):
    subclasses say how to save, restore and synchronise it."""

    def __init__(self, process_set=None):
        self.process_set = process_set
        self._reset_callbacks = []
        self._commits = 0          # commits since the state was made: the newest wins at sync()

    def register_reset_callbacks(self, callbacks):
        """Functions called, in order, after each reset (before sync)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state, then raises HostsUpdatedInterrupt if the job's
        workers changed."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every member of the state's set
        alike when the driver has a round newer than the one joined: the
        members agree on the newest round any of them saw (an allreduce)."""
        if not in_elastic_job():
            return
        agreed = _objects.allreduce_int64(newest_round(), Max, "hora.elastic.round", _resolved(self.process_set))
        if agreed > session.joined_round:
            raise HostsUpdatedInterrupt()

    def sync(self):
        """Makes every member equal to the member with the most commits
        (the lowest set rank among equals); new workers receive it."""
        group = _resolved(self.process_set)
        counts = _objects.allgather_int64(self._commits, "hora.elastic.commits", group)
        source = counts.index(max(counts))   # the first of the highest
        self._commits = counts[source]
        self._sync_from(group.ranks[source], group)

    # Subclasses:
    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def _sync_from(self, root, process_set):
        """Makes this member equal to global rank `root`'s saved state."""
        raise NotImplementedError


def broadcast_object(obj, root, process_set, name):
    """`obj` as global rank `root` has it, pickled (cloudpickle) and
    broadcast over `process_set`."""
    return _objects.broadcast_object(obj, root, name, process_set)


def _has_state_dict(value):
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


class ObjectState(State):
    """State held in attributes given as keyword arguments: ``state.epoch``,
    ``state.batch``. Plain values are saved by deep copy; an object with
    ``state_dict()``/``load_state_dict()`` (a sampler, a learning-rate
    scheduler) keeps its identity and has its state dict saved and loaded.
    Synchronised by broadcasting what was saved."""

    def __init__(self, process_set=None, **attributes):
        super().__init__(process_set)
        self._names = list(attributes)
        for name, value in attributes.items():
            setattr(self, name, value)
        self._saved = {}
        ObjectState.save(self)

    def save(self):
        self._saved = {}
        for name in self._names:
            value = getattr(self, name)
            self._saved[name] = copy.deepcopy(value.state_dict() if _has_state_dict(value) else value)

    def restore(self):
        for name, value in self._saved.items():
            current = getattr(self, name)
            if _has_state_dict(current):
                current.load_state_dict(copy.deepcopy(value))
            else:
                setattr(self, name, copy.deepcopy(value))

    def _sync_from(self, root, process_set):
        self._saved = broadcast_object(self._saved, root, process_set, "hora.elastic.objects")
        ObjectState.restore(self)


def run(func, reset=None):
    """Horovod's ``hvd.elastic.run``: wraps ``func(state, *args, **kwargs)``.
    `reset` re-initialises the framework's hora (shutdown, then init)."""

    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                remake_sets()
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            (reset or _reset)()
            state.on_reset()

    wrapper.__wrapped__ = func
    return wrapper


def _reset():
    """Shuts hora down and joins the next round with the running Config."""
    config = session.config
    _basics.shutdown()
    _basics.init_with_config(config)
