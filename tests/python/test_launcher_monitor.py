"""horarun --monitor (a live line per process set, a summary table at the
end, nothing without the flag) and --timeline-filename."""

import json
import os
import re
import subprocess
import sys

import pytest

from hora.runner import horovodrun, launch
from hora.runner import monitor as job_monitor

HERE = os.path.dirname(os.path.abspath(__file__))
MONITORED = os.path.join(HERE, "workers", "monitored.py")
LIVE = re.compile(r"^horarun: monitor [\d.]+ s: set (\d+) \[([\d, ]+)\]: ([\d.]+) ops/s, ([\d.]+) (G|M|K|)B/s, "
                  r"slowest member (-|rank \d+ \(last in \d+ of \d+\)), stalls (\d+)$")


def horarun(*args, np=4, cwd=None, timeout=90):
    cmd = [sys.executable, "-m", "hora.runner", *args[:-1], "-np", str(np), sys.executable, *args[-1]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def describe(run):
    return f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"


def summary_table(stderr):
    """{set id: {column: cell}} from the summary table horarun printed."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("horarun: monitor summary"))
    rows = {}
    for line in lines[start + 2:]:
        match = re.match(r"^horarun:\s+(\d+)\s+(\[[\d, ]+\])\s+(\d+)\s+([\d.]+ \w+)\s+(\S+ ms|-)\s+(\S+ ms|-)\s+"
                         r"(\S+%|-)\s+(\S+)\s+(\d+)\s+(\d+)\s+(.*)$", line)
        if not match:
            break
        rows[int(match.group(1))] = dict(zip(["ranks", "ops", "bytes", "negotiation", "transport", "cache",
                                              "fusion", "errors", "stalls", "slowest"], match.groups()[1:]))
    return rows


def test_monitor_prints_each_set_while_running_and_exact_counts_at_the_end():
    run = horarun("--monitor", "0.5", [MONITORED])
    assert run.returncode == 0, describe(run)
    live = [LIVE.match(line) for line in run.stderr.splitlines() if line.startswith("horarun: monitor ")
            and " s: set " in line]
    assert all(live), describe(run)
    working = {(m.group(1), m.group(2)) for m in live if float(m.group(3)) > 0}
    assert {("1", "0, 1"), ("2", "2, 3")} <= working, describe(run)
    table = summary_table(run.stderr)
    assert sorted(table) == [0, 1, 2], describe(run)
    # 40 and 30 allreduces of 1 and 4 KiB in the sets, 3 of 16 bytes on the global set.
    assert (table[1]["ranks"], table[1]["ops"], table[1]["bytes"]) == ("[0, 1]", "40", "40.0 KiB"), describe(run)
    assert (table[2]["ranks"], table[2]["ops"], table[2]["bytes"]) == ("[2, 3]", "30", "120.0 KiB"), describe(run)
    assert (table[0]["ranks"], table[0]["ops"], table[0]["bytes"]) == ("[0, 1, 2, 3]", "3", "48 B"), describe(run)
    for row in table.values():
        assert row["errors"] == "0" and row["stalls"] == "0", describe(run)
        assert row["fusion"] == "1.00", describe(run)   # one tensor per op: nothing to fuse
    # Repeated ops are agreed through the response cache after the first.
    assert float(table[1]["cache"].rstrip("%")) >= 90, describe(run)


def test_a_clean_run_shows_no_broken_set_and_lists_a_set_removed_within_an_interval(tmp_path):
    # Ranks that finish at different times leave their sets with a goodbye:
    # the sets close, they do not break (no "broken" in the summary, no
    # SET_BROKEN in any timeline). The set [0, 2] lived less than an
    # interval and is listed with its one op.
    run = horarun("--monitor", "30", "--timeline-filename", "trace.json",
                  [os.path.join(HERE, "workers", "clean_run.py")], cwd=tmp_path)
    assert run.returncode == 0, describe(run)
    summary = run.stderr[run.stderr.index("horarun: monitor summary"):]
    assert "broken" not in summary, describe(run)
    table = summary_table(run.stderr)
    by_ranks = {row["ranks"]: row for row in table.values()}
    assert set(by_ranks) == {"[0, 1, 2, 3]", "[0, 1]", "[2, 3]", "[0, 2]"}, describe(run)
    assert (by_ranks["[0, 2]"]["ops"], by_ranks["[0, 1]"]["ops"]) == ("1", "5"), describe(run)
    traces = sorted(tmp_path.glob("trace*.json"))   # the coordinators': ranks 0 and 2
    assert [trace.name for trace in traces] == ["trace.json", "trace.rank2.json"], traces
    for trace in traces:
        names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
        assert "SET_BROKEN" not in names, (trace, names)


def test_without_the_flag_nothing_of_the_monitor_is_printed():
    run = horarun([MONITORED])
    assert run.returncode == 0, describe(run)
    assert "monitor" not in run.stderr + run.stdout, describe(run)


def test_timeline_flag_writes_every_ranks_timeline(tmp_path):
    source = ("import numpy as np, hora.numpy as hvd\n"
              "hvd.init()\n"
              "for step in range(3): hvd.allreduce(np.ones(4, np.float32), name='grad')\n")
    run = horarun("--timeline-filename", "trace.json", "--timeline-mark-cycles", ["-c", source], np=2,
                  cwd=tmp_path)
    assert run.returncode == 0, describe(run)
    with open(tmp_path / "trace.json") as trace:
        events = json.load(trace)["traceEvents"]
    names = {event.get("name") for event in events}
    assert "NEGOTIATE_ALLREDUCE" in names and "ALLREDUCE" in names, names
    assert "CYCLE_START" in names, names


# --- the command line --------------------------------------------------------

@pytest.mark.parametrize("argv, interval, command", [
    (["--monitor", "-np", "2", "python", "x.py"], 2.0, ["python", "x.py"]),
    (["-np", "2", "--monitor", "python", "x.py"], 2.0, ["python", "x.py"]),
    (["-np", "2", "--monitor", "0.5", "python", "x.py"], 0.5, ["python", "x.py"]),
    (["-np", "2", "--monitor=3", "python", "x.py"], 3.0, ["python", "x.py"]),
    (["-np", "2", "python", "x.py", "--monitor"], None, ["python", "x.py", "--monitor"]),
])
def test_monitor_takes_an_optional_interval(argv, interval, command):
    args = launch.parse_args(argv, raise_errors=True)
    assert args.monitor == interval and args.command == command
    expected = {} if interval is None else {"HORA_MONITOR_INTERVAL": f"{interval:g}"}
    assert launch.job_environment(args) == expected


@pytest.mark.parametrize("argv, message", [
    (["--monitor", "0", "-np", "2", "x"], "--monitor takes a positive number of seconds, got 0"),
    (["--monitor", "--mpi", "-np", "2", "x"], "--monitor needs horarun's own launcher"),
    (["--monitor", "1", "--bogus", "-np", "2", "x"], "unknown option --bogus"),
])
def test_bad_monitor_arguments_are_refused(argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        launch.parse_args(argv, raise_errors=True)


def test_timeline_flags_become_the_ranks_variables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    args = launch.parse_args(["--timeline-filename", "out/t.json", "--timeline-mark-cycles", "-np", "2", "x"],
                             raise_errors=True)
    path = str(tmp_path / "out" / "t.json")
    assert launch.job_environment(args) == {
        "HORA_TIMELINE": path, "HOROVOD_TIMELINE": path,
        "HORA_TIMELINE_MARK_CYCLES": "1", "HOROVOD_TIMELINE_MARK_CYCLES": "1"}
    # horovodrun's flags map onto horarun's.
    mapped = horovodrun.horarun_arguments(horovodrun.parse_args(
        ["-np", "2", "--timeline-filename", "t.json", "--timeline-mark-cycles", "python", "x.py"]))
    assert mapped == ["-np", "2", "--timeline-filename", "t.json", "--timeline-mark-cycles", "--", "python", "x.py"]
    plain = horovodrun.horarun_arguments(horovodrun.parse_args(
        ["-np", "2", "--no-timeline-mark-cycles", "python", "x.py"]))
    assert plain == ["-np", "2", "--", "python", "x.py"]


# --- combining the ranks' reports, on made-up ones ----------------------------

class FakeStore:
    """Stands in for the RendezvousServer: the reports under hora.metrics.*."""

    def __init__(self):
        self.data = {}

    def publish(self, rank, at, sets, final=False):
        report = {"rank": rank, "at": at, "since": 0.0, "final": final, "sets": sets}
        self.data[job_monitor.metrics_key(rank).encode()] = json.dumps(report).encode()

    def values_of_keys_starting_with(self, prefix):
        return dict(self.data)


def counters(ranks, ops, nbytes, negotiation=0.0, hits=0, lookups=0, slowest=None, stalls=0, errors=0):
    return {"ranks": ranks, "ops": {"allreduce": ops}, "bytes": {"allreduce": nbytes},
            "negotiation_seconds": negotiation, "transport_seconds": negotiation / 2,
            "wait_for_slowest_seconds": 0.0, "slowest_member": slowest or {}, "cache_lookups": lookups,
            "cache_hits": hits, "responses": ops, "tensors": 2 * ops, "errors": errors, "stalls": stalls,
            "broken": False}


def test_live_rates_come_from_the_coordinators_last_two_reports():
    store = FakeStore()
    printed = []
    monitor = job_monitor.JobMonitor(store, 1.0, printed.extend)
    monitor._started_at = 0.0
    store.publish(2, 10.0, {5: counters([2, 3], 100, 1000, slowest={3: 4})})
    store.publish(3, 10.0, {5: counters([2, 3], 100, 1000)})
    monitor.poll()
    store.publish(2, 12.0, {5: counters([2, 3], 300, 2_001_000, slowest={3: 10, 2: 2}, stalls=1)})
    lines = monitor.live_lines()
    assert len(lines) == 1
    assert lines[0].endswith("set 5 [2, 3]: 100.0 ops/s, 1.0 MB/s, slowest member rank 3 (last in 6 of 8), "
                             "stalls 1"), lines
    # Once the coordinator has made its last report, the set has no live line.
    store.publish(2, 13.0, {5: counters([2, 3], 300, 2_001_000)}, final=True)
    assert monitor.live_lines() == []


def test_the_summary_takes_ops_from_the_coordinator_and_times_over_all_members():
    store = FakeStore()
    monitor = job_monitor.JobMonitor(store, 1.0, print)
    store.publish(0, 1.0, {0: counters([0, 1], 10, 4096, negotiation=0.02, hits=9, lookups=10, slowest={1: 1}),
                           7: counters([0, 1], 4, 64)})
    store.publish(1, 1.0, {0: counters([0, 1], 10, 4096, negotiation=0.04, hits=8, lookups=10, errors=1)})
    monitor.poll()
    # Set 7 is removed: later reports no longer hold it; its last counts stay.
    store.publish(0, 2.0, {0: counters([0, 1], 12, 4096 + 512, negotiation=0.02, hits=11, lookups=12,
                                       slowest={1: 1})}, final=True)
    lines = monitor.summary_lines()
    assert lines[0].startswith("monitor summary by process set")
    assert lines[3].endswith(" - (no report from rank(s) 1)"), lines
    header, row0, row7 = (line.split() for line in lines[1:])
    assert header[:3] == ["set", "ranks", "ops"]
    # Coordinator's 12 ops and 4.5 KiB; (0.02 + 0.04) s over 22 member ops; 19 hits of 22 lookups.
    assert row0 == ["0", "[0,", "1]", "12", "4.5", "KiB", "2.727", "ms", "1.364", "ms", "86.4%", "2.00", "1", "0",
                    "rank", "1", "(last", "in", "1", "of", "1)"]
    assert row7[:6] == ["7", "[0,", "1]", "4", "64", "B"]
