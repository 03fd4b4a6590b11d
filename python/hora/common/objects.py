"""Python objects and integers across a process set, written once over bytes
for every front end: ``broadcast_object`` and ``allgather_object`` (Horovod's;
pickled with cloudpickle, so lambdas and locally defined classes travel too),
and the integers elastic training agrees on. A front end's functions of the
same names only check their own arguments and call these; the ops run on
plain buffers (bytearray, array.array), so no framework and no array
library is needed. The caller's thread; each function blocks until done.

Each object takes two ops named ``<name>.sz`` (the lengths) and ``<name>.t``
(the bytes), as on Horovod.
"""

import array

import cloudpickle

from hora import _core
from hora.common import core_types as _types
from hora.common import ops as _ops
from hora.common.process_sets import global_process_set


def _int64s(values):
    return array.array("q", values)


def _run(op, source, output, name, process_set, finish, **options):
    return _ops.synchronize(_ops.submit(op, source, output, name, process_set, finish, **options))


def broadcast_bytes(data, root_rank, name, process_set=global_process_set):
    """``data`` as global rank ``root_rank`` has it (the other members' ``data``
    is not read; they may pass None)."""
    mine = _core.rank() == root_rank
    length = _int64s([len(data) if mine else 0])
    _run(_types.BROADCAST, length, length, f"{name}.sz", process_set, lambda work: None, root=root_rank,
         caller_waits=True)
    payload = bytearray(data) if mine else bytearray(length[0])
    _run(_types.BROADCAST, payload, payload, f"{name}.t", process_set, lambda work: None, root=root_rank,
         caller_waits=True)
    return bytes(payload)


def allgather_bytes(data, name, process_set=global_process_set):
    """Every member's ``data``, in set-rank order."""
    lengths = _run(_types.ALLGATHER, _int64s([len(data)]), None, f"{name}.sz", process_set,
                   lambda work: _core.output(work, _types.DATA_TYPES["int64"]).tolist())
    gathered = _run(_types.ALLGATHER, bytearray(data), None, f"{name}.t", process_set,
                    lambda work: _core.output(work, _types.DATA_TYPES["uint8"]).tobytes())
    parts, start = [], 0
    for length in lengths:
        parts.append(gathered[start:start + length])
        start += length
    return parts


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """``obj`` as it is on ``root_rank`` (a global rank), pickled with
    cloudpickle and broadcast over the set; the root gets ``obj`` itself."""
    name = name or type(obj).__name__
    if _core.rank() == root_rank:
        broadcast_bytes(cloudpickle.dumps(obj), root_rank, name, process_set)
        return obj
    return cloudpickle.loads(broadcast_bytes(None, root_rank, name, process_set))


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every member's ``obj`` (pickled with cloudpickle), in
    set-rank order."""
    name = name or type(obj).__name__
    return [cloudpickle.loads(data) for data in allgather_bytes(cloudpickle.dumps(obj), name, process_set)]


def allgather_int64(value, name, process_set=global_process_set):
    """Every member's integer ``value``, in set-rank order."""
    return _run(_types.ALLGATHER, _int64s([value]), None, name, process_set,
                lambda work: _core.output(work, _types.DATA_TYPES["int64"]).tolist())


def allreduce_int64(value, op, name, process_set=global_process_set):
    """Integer ``value`` reduced over the set with Horovod's constant ``op``
    (hvd.Max, hvd.Sum, ...)."""
    buffer = _int64s([value])
    _run(_types.ALLREDUCE, buffer, buffer, name, process_set, lambda work: None, reduce_op=op, caller_waits=True)
    return buffer[0]
