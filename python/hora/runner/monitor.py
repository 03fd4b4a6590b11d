"""horarun --monitor: a live line per process set while the job runs, and a
per-set summary table at its end.

Each rank publishes its counters (hvd.metrics() for every set it belongs
to) as JSON under `hora.metrics.<rank>` in the job's store, every
HORA_MONITOR_INTERVAL seconds and once more at hvd.shutdown()
(hora/common/monitor.py). horarun reads those keys from its own
rendezvous server. A set's counters are kept per member; horarun combines
them so:

- ops, bytes, fusion ratio, stalls and the slowest member are the set's
  coordinator's (its lowest member): every member runs the same ops, and
  bytes are the payload of one member (for an allreduce, the tensor's size),
  not a sum over members, so GB/s is the rate at which the set's ops move
  their tensors;
- negotiation and transport time per op and the cache hit rate are over
  every member (summed times over summed ops, hits over lookups);
- errors are the most any member counted.

The live rates are the coordinator's deltas between its last two published
reports. A set removed during the job is summarized with the counts its
members had when they removed it (each rank's reports keep them, marked
"removed", so that a set that lived less than an interval is listed too).
"""

import dataclasses
import json
import threading
import time

DEFAULT_INTERVAL = 2.0
# Read by the ranks (hora/common/monitor.py): seconds between two reports.
INTERVAL_VARIABLE = "HORA_MONITOR_INTERVAL"
KEY_PREFIX = "hora.metrics."


def metrics_key(rank):
    """The store key under which rank `rank` publishes its counters."""
    return f"{KEY_PREFIX}{rank}"


@dataclasses.dataclass
class Report:
    """One rank's published counters: `sets` maps set id -> hvd.metrics()
    of that set; `at` and `since` (its hvd.init()) are the rank's own
    clock in seconds; `final` is set by the report made at shutdown."""
    rank: int
    at: float
    since: float
    final: bool
    sets: dict


# The counters the monitor reads from a set's hvd.metrics(): numbers, and
# maps of numbers (slowest_member's keys are ranks).
_NUMBERS = ("negotiation_seconds", "transport_seconds", "cache_lookups", "cache_hits", "responses", "tensors",
            "errors", "stalls", "broken")
_MAPS = ("ops", "bytes", "slowest_member")
_LIMIT = 2 ** 63   # counters are 64-bit; anything larger (or NaN) is not one


def _is_number(value):
    return isinstance(value, (int, float)) and -_LIMIT < value < _LIMIT


def _checked_counters(counters):
    """`counters` if they hold what the monitor reads, with the types it
    reads them as; ValueError otherwise."""
    ranks = counters["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(r, int) and _is_number(r) for r in ranks):
        raise ValueError("ranks")
    if not all(_is_number(counters.get(name, 0)) for name in _NUMBERS):
        raise ValueError("a counter")
    for name in _MAPS:
        found = counters.get(name, {})
        if not isinstance(found, dict) or not all(_is_number(v) for v in found.values()):
            raise ValueError(name)
    if not all(str(rank).isdigit() and str(rank).isascii() for rank in counters.get("slowest_member", {})):
        raise ValueError("slowest_member")
    return counters


def parse_report(key, value):
    """The Report stored under `key` (bytes), or None if it is not one:
    whatever a rank (or anyone holding the store's secret) wrote there."""
    try:
        rank = int(key[len(KEY_PREFIX):])
        data = json.loads(value)
        sets = {int(set_id): _checked_counters(counters) for set_id, counters in data["sets"].items()}
        at, since = float(data["at"]), float(data["since"])
        return Report(rank, at, since, bool(data.get("final")), sets)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None


def _total(counters, name):
    return sum(counters.get(name, {}).values())


def _slowest(counts):
    """'rank 3 (last in 9 of 20)' for {rank: negotiations in which it
    submitted last}; '-' without any (ops agreed through the response
    cache do not say who came last)."""
    counts = {int(rank): n for rank, n in counts.items() if n > 0}
    total = sum(counts.values())
    if not total:
        return "-"
    rank = max(sorted(counts), key=lambda r: counts[r])
    return f"rank {rank} (last in {counts[rank]} of {total})"


def _rate_text(bytes_per_second):
    """'1.25 GB/s', '20.5 KB/s': decimal units, GB/s from 1 GB/s on."""
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if bytes_per_second >= size:
            return f"{bytes_per_second / size:.{2 if unit == 'GB/s' else 1}f} {unit}"
    return f"{bytes_per_second:.0f} B/s"


def _set_text(set_id, ranks):
    return f"set {set_id} [{', '.join(map(str, ranks))}]"


def _bytes_text(count):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _milliseconds(seconds, ops):
    return f"{1e3 * seconds / ops:.3f} ms" if ops else "-"


def live_line(set_id, now, before):
    """The live line of one set from its coordinator's counters `now` and
    `before` ((at, counters) each; `before` may have empty counters)."""
    (at, counters), (before_at, earlier) = now, before
    seconds = max(at - before_at, 1e-9)
    ops = _total(counters, "ops") - _total(earlier, "ops")
    moved = _total(counters, "bytes") - _total(earlier, "bytes")
    previous_counts = earlier.get("slowest_member", {})
    slowest = {rank: n - previous_counts.get(rank, 0) for rank, n in counters.get("slowest_member", {}).items()}
    line = (f"{_set_text(set_id, counters['ranks'])}: {ops / seconds:.1f} ops/s, {_rate_text(moved / seconds)}, "
            f"slowest member {_slowest(slowest)}, stalls {counters.get('stalls', 0)}")
    return line + (", broken" if counters.get("broken") else "")


def summary_row(set_id, by_member):
    """One row of the summary table for a set, from {rank: its counters}."""
    coordinator = by_member[min(by_member)]
    ranks = coordinator["ranks"]
    member_ops = sum(_total(c, "ops") for c in by_member.values())
    lookups = sum(c.get("cache_lookups", 0) for c in by_member.values())
    hits = sum(c.get("cache_hits", 0) for c in by_member.values())
    responses = coordinator.get("responses", 0)
    silent = [r for r in ranks if r not in by_member]
    slowest = _slowest(coordinator.get("slowest_member", {}))
    notes = (["broken"] if any(c.get("broken") for c in by_member.values()) else []) + (
        [f"no report from rank(s) {', '.join(map(str, silent))}"] if silent else [])
    return [str(set_id), "[" + ", ".join(map(str, ranks)) + "]", str(_total(coordinator, "ops")),
            _bytes_text(_total(coordinator, "bytes")),
            _milliseconds(sum(c.get("negotiation_seconds", 0.0) for c in by_member.values()), member_ops),
            _milliseconds(sum(c.get("transport_seconds", 0.0) for c in by_member.values()), member_ops),
            f"{100 * hits / lookups:.1f}%" if lookups else "-",
            f"{coordinator.get('tensors', 0) / responses:.2f}" if responses else "-",
            str(max(c.get("errors", 0) for c in by_member.values())), str(coordinator.get("stalls", 0)),
            slowest + (f" ({'; '.join(notes)})" if notes else "")]


SUMMARY_HEADER = ["set", "ranks", "ops", "bytes", "negotiation/op", "transport/op", "cache hits", "fusion",
                  "errors", "stalls", "slowest member"]


def table_lines(header, rows):
    """`rows` under `header`, columns aligned: text columns (the 2nd and
    the last) to the left, numbers to the right."""
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    left = {1, len(header) - 1}
    lines = []
    for row in [header] + rows:
        cells = [cell.ljust(width) if i in left else cell.rjust(width) for i, (cell, width)
                 in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


class JobMonitor:
    """Reads the ranks' reports from `server` (the job's RendezvousServer)
    every `interval` seconds on its own thread and prints, through
    `print_lines` (a list of lines -> None), one line per running set.
    stop() ends the thread; summary_lines() reads the last reports and
    returns the summary table. start/stop/summary_lines: one caller."""

    def __init__(self, server, interval, print_lines):
        self._server = server
        self._interval = interval
        self._print_lines = print_lines
        self._latest = {}      # rank -> its last Report
        self._previous = {}    # rank -> the Report before it
        self._last_seen = {}   # set id -> {rank: counters}, kept after the set leaves the reports
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = None
        self._started_at = None

    def start(self):
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="horarun-monitor", daemon=True)
        self._thread.start()

    def stop(self):
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self):
        while not self._stopped.wait(self._interval):
            lines = self.live_lines()
            if lines and not self._stopped.is_set():
                self._print_lines(lines)

    def poll(self):
        """Takes in the reports the ranks have published since the last call."""
        with self._lock:
            for key, value in self._server.values_of_keys_starting_with(KEY_PREFIX).items():
                report = parse_report(key.decode(errors="replace"), value)
                latest = self._latest.get(report.rank) if report is not None else None
                if report is None or (latest is not None and latest.at >= report.at):
                    continue
                if latest is not None:
                    self._previous[report.rank] = latest
                self._latest[report.rank] = report
                for set_id, counters in report.sets.items():
                    self._last_seen.setdefault(set_id, {})[report.rank] = counters

    def live_lines(self):
        """One line per set whose coordinator still reports, after a poll()."""
        self.poll()
        elapsed = time.monotonic() - self._started_at
        lines = []
        with self._lock:
            for set_id in sorted(self._last_seen):
                reporting = [r for r, report in self._latest.items() if set_id in report.sets]
                if not reporting:
                    continue
                report = self._latest[min(reporting)]
                if report.final or report.sets[set_id].get("removed"):
                    continue
                previous = self._previous.get(report.rank)
                if previous is not None and set_id in previous.sets:
                    before = (previous.at, previous.sets[set_id])
                else:
                    before = (previous.at if previous is not None else report.since, {})
                lines.append(f"monitor {elapsed:.1f} s: " +
                             live_line(set_id, (report.at, report.sets[set_id]), before))
        return lines

    def summary_lines(self):
        """The per-set summary table (after a last poll()), or a line that
        says no rank reported."""
        self.poll()
        with self._lock:
            rows = [summary_row(set_id, by_member) for set_id, by_member in sorted(self._last_seen.items())]
        if not rows:
            return ["monitor: no rank published its counters (did the ranks call hvd.init()?)"]
        title = ("monitor summary by process set (ops, bytes, fusion ratio, stalls and the slowest member as "
                 "the set's coordinator counts them; times per op and cache hits over all its members):")
        return [title] + ["  " + line for line in table_lines(SUMMARY_HEADER, rows)]
