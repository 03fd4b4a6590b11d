"""The timeline and the per-set counters, for every front end
(docs/observability.md)."""

from hora import _core
from hora.common.process_sets import ProcessSet


def _require_init():
    if not _core.is_initialized():
        raise ValueError("hora has not been initialized; call hvd.init() first")


def start_timeline(file_path, mark_cycles=False):
    """Starts recording a Chrome-trace timeline. Every rank may call it: rank
    0 writes ``file_path``; another rank writes ``<stem>.rank<r><ext>`` if it
    coordinates (is the lowest member of) a set that rank 0 is not in, and no
    file otherwise. Each file holds the sets its rank coordinates, so rank
    0's holds every set rank 0 belongs to. ``mark_cycles``: mark each batch
    of work (CYCLE_START). A running timeline is stopped first."""
    _require_init()
    if not isinstance(file_path, (str, bytes)) and not hasattr(file_path, "__fspath__"):
        raise ValueError(f"start_timeline: file_path must be a path, not {type(file_path).__name__}")
    import os
    _core.start_timeline(os.fsdecode(os.fspath(file_path)), bool(mark_cycles))


def stop_timeline():
    """Writes what the timeline holds and closes its file (valid JSON)."""
    _require_init()
    _core.stop_timeline()


def timeline_file(file_path, rank):
    """The file rank ``rank`` writes for ``start_timeline(file_path)``."""
    return _core.timeline_file(str(file_path), int(rank))


def _set_metrics(set_id):
    found = _core.metrics(set_id)
    _, ranks, _ = _core.process_set(set_id)
    found["process_set_id"] = set_id
    found["ranks"] = list(ranks)
    lookups, responses = found["cache_lookups"], found["responses"]
    found["cache_hit_rate"] = found["cache_hits"] / lookups if lookups else 0.0
    found["fusion_ratio"] = found["tensors"] / responses if responses else 0.0
    return found


def metrics(process_set=None):
    """This rank's counters of ``process_set`` (a ProcessSet or its id) as a
    dict; with no argument, {process set id: counters} for every set this
    rank belongs to."""
    _require_init()
    if process_set is None:
        rank = _core.rank()
        return {set_id: _set_metrics(set_id) for set_id in _core.process_set_ids()
                if rank in _core.process_set(set_id)[1]}
    set_id = process_set.process_set_id if isinstance(process_set, ProcessSet) else process_set
    if isinstance(set_id, bool) or not isinstance(set_id, int):
        raise ValueError(f"metrics: process_set must be a ProcessSet or its id, not {process_set!r}")
    return _set_metrics(set_id)
