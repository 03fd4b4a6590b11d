"""The timeline on 4 real processes: two sets training side by side, each
set's lane in its coordinator's file with its ranks, every tensor with its
negotiation ticks and phases in order, start/stop mid-run, and a valid file
after an exception and after SIGTERM; the merge tool; Horovod's own check."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fault_checks import describe, results_of

from hora.timeline import main as timeline_main
from hora.timeline import merge

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "timeline.py")
REPO = os.path.dirname(os.path.dirname(HERE))


def horarun_cmd(*args, np=4, keep_going=False):
    return ([sys.executable, "-m", "hora.runner"] + (["--keep-going"] if keep_going else [])
            + ["-np", str(np), sys.executable, WORKER] + [str(a) for a in args])


def events_of(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def lanes(events):
    """{pid: lane name}."""
    return {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}


def rows(events, pid):
    """{row name: [events on it, in file order]} of one lane."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("name") == "thread_name" and e["pid"] == pid and e["tid"] != 0}
    out = {name: [] for name in names.values()}
    for e in events:
        if e["pid"] == pid and e.get("ph") != "M" and e["tid"] in names:
            out[names[e["tid"]]].append(e)
    return out


@pytest.fixture(scope="module")
def window_run(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("window")
    run = subprocess.run(horarun_cmd("window", outdir), capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, describe(run)
    return outdir, run


def test_each_coordinator_writes_its_sets_lanes(window_run):
    outdir, _ = window_run
    rank0 = events_of(outdir / "trace.json")
    rank2 = events_of(outdir / "trace.rank2.json")
    assert sorted(lanes(rank0).values()) == ["process set 0 [0, 1, 2, 3]", "process set 1 [0, 1]"]
    assert list(lanes(rank2).values()) == ["process set 2 [2, 3]"]
    # Ranks 1 and 3 coordinate no set: no file.
    assert sorted(os.listdir(outdir)) == ["trace.json", "trace.rank2.json"]


@pytest.mark.parametrize("tag,path,pid,ranks", [("a", "trace.json", 1, [0, 1]), ("b", "trace.rank2.json", 2, [2, 3])])
def test_every_tensor_has_its_negotiation_and_phases_in_order(window_run, tag, path, pid, ranks):
    outdir, _ = window_run
    by_row = rows(events_of(outdir / path), pid)
    assert sorted(by_row) == [f"allreduce.bias.{tag}", f"allreduce.grad.{tag}", f"allreduce.late.{tag}",
                              f"broadcast.lr.{tag}"]
    for row, events in by_row.items():
        ops = [e for e in events if e["name"] in ("ALLREDUCE", "BROADCAST")]
        # Steps 2..5 ran while the timeline was on ("late" from step 3).
        steps = 3 if row.startswith("allreduce.late") else 4
        assert len(ops) == steps, (row, events)
        starts = [e["ts"] for e in ops]
        assert starts == sorted(starts) and len(set(starts)) == steps, (row, starts)
        negotiations = [e for e in events if e["name"].startswith("NEGOTIATE_")]
        assert len(negotiations) == steps, (row, events)
        for negotiation, op in zip(negotiations, ops):
            assert negotiation["name"] == "NEGOTIATE_" + op["name"]
            assert negotiation["ts"] <= op["ts"], (negotiation, op)
            assert negotiation["ts"] + negotiation["dur"] <= op["ts"] + 1, (negotiation, op)
            # The transport's phase nests inside the op.
            inner = [e for e in events if e["name"].endswith("_" + op["name"]) and e["name"] != negotiation["name"]
                     and op["ts"] <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"]]
            assert inner, (row, op, events)
        # Later steps hit the response cache.
        assert [e["name"] for e in events].count("CACHE_HIT") >= steps - 1, (row, events)
        if not row.startswith("allreduce.late"):
            continue
        # A tensor first submitted while the timeline runs is negotiated in
        # full: one tick per member, named by its global rank, inside the
        # negotiation span, which names the member that came last.
        ticks = [e for e in events if e["ph"] == "i" and e["name"].isdigit()]
        assert sorted(int(t["name"]) for t in ticks) == ranks, (row, events)
        first = negotiations[0]
        for tick in ticks:
            assert first["ts"] <= tick["ts"] <= first["ts"] + first["dur"], (tick, first)
        assert first["args"]["slowest_rank"] == int(max(ticks, key=lambda t: t["ts"])["name"]), (first, ticks)


def test_mark_cycles_and_byte_counts(window_run):
    outdir, _ = window_run
    events = events_of(outdir / "trace.json")
    assert any(e["name"] == "CYCLE_START" for e in events)
    grads = [e for e in rows(events, 1)["allreduce.grad.a"] if e["name"] == "ALLREDUCE"]
    assert all(e["args"]["bytes"] == 256 for e in grads), grads


def test_metrics_count_the_traffic_exactly(window_run):
    _, run = window_run
    for rank, result in results_of(run).items():
        metrics = result["metrics"]
        assert metrics["ops"] == {"allreduce": 16 + 5, "broadcast": 8}, metrics
        assert metrics["bytes"] == {"allreduce": 8 * (256 + 16) + 5 * 4, "broadcast": 8 * 16}, metrics
        assert metrics["ranks"] == ([0, 1] if rank < 2 else [2, 3])
        assert metrics["errors"] == 0 and metrics["stalls"] == 0


def test_merge_makes_one_trace_of_every_set(window_run, tmp_path, capsys):
    outdir, _ = window_run
    merged_path = tmp_path / "merged.json"
    assert timeline_main(["merge", str(merged_path), str(outdir / "trace.json")]) == 0
    merged = events_of(merged_path)
    assert sorted(lanes(merged)) == [0, 1, 2]
    separate = events_of(outdir / "trace.json") + events_of(outdir / "trace.rank2.json")
    assert len(merged) == len(separate)
    assert "events from 2 file(s)" in capsys.readouterr().out


def test_merge_refuses_a_file_that_is_not_a_timeline(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert timeline_main(["merge", str(tmp_path / "out.json"), str(bad), str(bad)]) == 2
    assert "bad.json is not a timeline (invalid JSON" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no traceEvents list"):
        (tmp_path / "obj.json").write_text('{"x": 1}')
        merge([tmp_path / "obj.json"])


def test_a_timeline_into_a_missing_directory_fails_at_init(tmp_path):
    path = tmp_path / "missing" / "trace.json"
    run = subprocess.run([sys.executable, "-c", "import hora.numpy as hvd; hvd.init()"], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, HOROVOD_TIMELINE=str(path)))
    assert run.returncode != 0
    assert f"HOROVOD_TIMELINE={path}: the directory {path.parent} does not exist" in run.stderr, run.stderr


def test_the_file_is_valid_after_an_exception(tmp_path):
    path = tmp_path / "trace.json"
    run = subprocess.run(horarun_cmd("exception"), capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, HOROVOD_TIMELINE=str(path)))
    assert run.returncode != 0, describe(run)
    assert "an error in the training loop" in run.stderr, describe(run)
    rows_a = rows(events_of(path), 1)
    assert len([e for e in rows_a["allreduce.grad.a"] if e["name"] == "ALLREDUCE"]) == 4


def test_the_file_is_valid_after_sigterm(tmp_path):
    path = tmp_path / "trace.json"
    job = subprocess.Popen(horarun_cmd("forever"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=REPO, env=dict(os.environ, HOROVOD_TIMELINE=str(path)))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and '"ALLREDUCE"' in path.read_text():
                break
            time.sleep(0.1)
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=60)
    finally:
        job.kill()
    events = events_of(path)
    assert any(e["name"] == "ALLREDUCE" for e in events)
    assert lanes(events)[1] == "process set 1 [0, 1]"


def test_start_timeline_checks_its_arguments():
    code = ("import hora.numpy as hvd\n"
            "try:\n    hvd.start_timeline('/x')\nexcept ValueError as e:\n    print('BEFORE', e)\n"
            "hvd.init()\n"
            "for bad in (None, 3):\n"
            "    try:\n        hvd.start_timeline(bad)\n    except ValueError as e:\n        print('BAD', e)\n"
            "try:\n    hvd.start_timeline('/nonexistent/dir/t.json')\nexcept ValueError as e:\n    print('DIR', e)\n"
            "try:\n    hvd.metrics(7)\nexcept ValueError as e:\n    print('SET', e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, describe(run)
    assert "BEFORE hora has not been initialized" in run.stdout
    assert "BAD start_timeline: file_path must be a path, not NoneType" in run.stdout
    assert "BAD start_timeline: file_path must be a path, not int" in run.stdout
    assert "DIR cannot create the timeline file '/nonexistent/dir/t.json'" in run.stdout
    assert "SET process set 7 is not a live set this rank (global rank 0) belongs to" in run.stdout
