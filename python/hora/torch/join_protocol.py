"""Horovod's ``join`` on top of the core, as a protocol among a set's members.

Horovod's coordinator lets a rank that has called ``join()`` take part in the
allreduces the other ranks still submit, with zeros, until every rank has
joined. hora's core has no such notion, so hora.torch carries it itself:

- Every hora.torch op on a process set is *announced* on that set's control
  sequence: an allgather named ``hora.join.<n>`` (n counts this rank's
  announcements on the set) in which each active member contributes one row
  describing its op(s) — name, dtype, shape, reduction and scale factors — and
  each joined member contributes no row. Allreduces do not wait for their
  announcement; other ops wait for it and fail if a member has joined.
- ``join()`` announces a join row, then loops: it takes part in every
  announcement with an empty row and submits a zero tensor for each allreduce
  the active members describe. When an announcement has no rows at all, every
  member has joined; all of them see the same announcements, so they return
  the same rank: the one that joined last (the highest of a simultaneous batch).

Members may submit ops in different orders: a joined rank counts, per op name,
how often each member described it and contributes that many zero tensors.
"""

import collections
import json
import threading
import time

import numpy as np
import torch

from hora import _core
from hora.common import ops as _ops
from hora.common import process_sets as _process_sets
from hora.errors import HoraError
from hora.torch import tensors as _tensors


def allreduce_op(name, tensor, reduce_op, prescale, postscale):
    """Describes an allreduce so a joined member can contribute zeros to it."""
    return {"t": "allreduce", "n": name, "d": _tensors.dtype_name(tensor.dtype), "s": list(tensor.shape),
            "o": int(reduce_op), "a": float(prescale), "b": float(postscale)}


def other_op(kind, name):
    """Describes an op a joined member cannot take part in (allgather, broadcast, ...)."""
    return {"t": kind, "n": name}


class _Channel:
    """One process set's announcement sequence on this rank. Any thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sequence = 0
        self.outstanding = []  # announcements nobody waits for, kept alive until done


_channels = {}
_channels_lock = threading.Lock()


def reset():
    """Forgets every set's sequence (init and shutdown)."""
    with _channels_lock:
        _channels.clear()


def drain(seconds):
    """Waits up to ``seconds`` for the announcements nobody waits for to
    finish (shutdown). A member that shut down with its announcement still
    pending would leave the others inside that allgather, which MPI cannot
    interrupt; they finish as soon as every member has submitted them."""
    with _channels_lock:
        pending = [a for channel in _channels.values() for a in channel.outstanding]
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        pending = [a for a in pending if not a.done()]
        if pending:
            time.sleep(0.001)


def _channel(set_id):
    with _channels_lock:
        return _channels.setdefault(set_id, _Channel())


class Announcement:
    """One step of a set's announcement sequence; ``rows()`` waits for it."""

    def __init__(self, handle, process_set):
        self._handle = handle
        self._process_set = process_set

    def done(self):
        return _ops.poll(self._handle)

    def rows(self):
        data = _ops.synchronize(self._handle)
        return [json.loads(line) for line in data.split(b"\n") if line]

    def require_all_active(self, kind, name):
        """Raises HorovodInternalError when a member of the set has joined."""
        present = {row["r"] for row in self.rows()}
        joined = [r for r in self._process_set.ranks if r not in present]
        if joined:
            label = f"'{name}'" if name else "(unnamed)"
            raise HoraError(f"{kind} {label} on process set {self._process_set.process_set_id} cannot run: "
                            f"rank{'s' if len(joined) > 1 else ''} {', '.join(map(str, joined))} "
                            "called join(); only allreduce continues while members have joined")


def _announce(process_set, row, keep):
    ps = _process_sets.global_process_set if process_set is None else process_set
    set_id = _process_sets.resolve(ps)
    payload = json.dumps(row, separators=(",", ":")).encode() + b"\n" if row is not None else b""
    array = np.frombuffer(payload, dtype=np.uint8).copy()
    channel = _channel(set_id)
    with channel.lock:
        name = f"hora.join.{channel.sequence}"
        channel.sequence += 1
        handle = _ops.submit(_ops.ALLGATHER, array, None, name, ps,
                             lambda work: _ops.output_of(work, np.uint8).tobytes())
        announcement = Announcement(handle, ps)
        if keep:
            channel.outstanding = [a for a in channel.outstanding if not a.done()]
            channel.outstanding.append(announcement)
    return announcement


def announce(process_set, ops, wait=False):
    """Announces this active member's ``ops`` on the set. With ``wait`` the
    caller will wait for the result; otherwise it is kept until done."""
    return _announce(process_set, {"r": _core.rank(), "ops": ops}, keep=not wait)


class _ZeroContributions:
    """A joined member's share of the allreduces the active members run."""

    def __init__(self, process_set):
        self._process_set = process_set
        self._seen = {}                          # key -> member -> times described
        self._submitted = collections.Counter()  # key -> zero tensors submitted
        self._pending = {}                       # op name -> its latest handle
        self._unnamed = []

    def add(self, member, op):
        key = op["n"] if op["n"] else ("", op["d"], tuple(op["s"]), op["o"], op["a"], op["b"])
        counts = self._seen.setdefault(key, collections.Counter())
        counts[member] += 1
        target = max(counts.values())
        while self._submitted[key] < target:
            self._submitted[key] += 1
            self._submit(op)

    def _submit(self, op):
        name = op["n"]
        if name in self._pending:  # the core refuses two pending ops of one name
            _ops.synchronize(self._pending.pop(name))
        zeros = torch.zeros(op["s"], dtype=_tensors.dtype_from_name(op["d"]))
        output = torch.empty_like(zeros)
        handle = _ops.submit(_ops.ALLREDUCE, zeros, output, name, self._process_set, lambda work: None,
                             reduce_op=op["o"], prescale=op["a"], postscale=op["b"])
        if name:
            self._pending[name] = handle
        else:
            self._unnamed.append(handle)

    def wait(self):
        for handle in list(self._pending.values()) + self._unnamed:
            _ops.synchronize(handle)


def join(process_set):
    """Blocks until every member of ``process_set`` has joined, contributing
    zeros to the allreduces of the members still active. Returns the global
    rank of the member that joined last."""
    ps = _process_sets.global_process_set if process_set is None else process_set
    announcement = _announce(ps, {"r": _core.rank(), "join": True}, keep=False)
    zeros = _ZeroContributions(ps)
    last = _core.rank()
    while True:
        rows = announcement.rows()
        if not rows:
            break
        joiners = [row["r"] for row in rows if row.get("join")]
        if joiners:
            last = max(joiners)
        for row in rows:
            for op in row.get("ops", ()):
                if op["t"] == "allreduce":
                    zeros.add(row["r"], op)
        announcement = _announce(ps, None, keep=False)
    zeros.wait()
    return last
