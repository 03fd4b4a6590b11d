"""What recording a timeline costs: the same work with and without the
timeline, alternating, on two process sets.

    python benchmarks/timeline_overhead.py                          # examples/multitask.py, 5 jobs each way
    python benchmarks/timeline_overhead.py --workload small-ops     # a tight loop of small allreduces

Workloads:
- multitask: examples/multitask.py unchanged (two tasks on sets [0, 2] and
  [1, 3], --steps steps), one job with HOROVOD_TIMELINE and one without,
  --repeats times, in the order off, on, on, off, off, on, ... so that a
  drift in the machine's load falls on both sides. The rate is the
  "N steps/s" each task prints.
- small-ops: the worst case for the timeline, where every op adds its
  events and almost nothing else happens: in one job, each of two sets
  (even and odd ranks) runs 16-byte allreduces under three names in
  --repeats pairs of blocks of --steps ops, the timeline started
  (hvd.start_timeline) for the second block of each pair and stopped after
  it. The rate is ops per second on each set's first rank.

Prints, per task, the median rate without and with the timeline with
their range over the runs (blocks), the median of the pairs' ratios (with
/ without: 1.00 means the timeline costs nothing) with its quartiles, and
the size of a timeline file. Not a test.
"""

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MULTITASK = os.path.join(os.path.dirname(HERE), "examples", "multitask.py")
FINAL_LINE = re.compile(r"\[(?P<task>[^\]]+)\] final: .*, (?P<rate>[0-9.]+) steps/s")
BLOCK_RATES = re.compile(r"\[(?P<task>[^\]]+)\] RATES (?P<rates>.*)$", re.MULTILINE)
BLOCK_CPU = re.compile(r"\[(?P<task>[^\]]+)\] CPU (?P<cpu>.*)$", re.MULTILINE)


def small_ops_worker(steps, pairs, timeline_path):
    """Runs under horarun, on every rank: the small-ops workload."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    even = hvd.add_process_set(range(0, hvd.size(), 2))
    odd = hvd.add_process_set(range(1, hvd.size(), 2))
    my_set = even if even.included() else odd
    task = "even set" if my_set is even else "odd set"
    values = np.ones(4, np.float32)
    names = [f"{task}.{i}" for i in range(3)]
    for step in range(3 * len(names)):  # every name in the response cache first
        hvd.allreduce(values, name=names[step % 3], process_set=my_set)
    rates, cpu = {False: [], True: []}, {False: [], True: []}
    for block in range(2 * pairs):
        timeline = block % 2 == 1
        if timeline:
            hvd.start_timeline(timeline_path)
        hvd.barrier(process_set=my_set)
        start, start_cpu = time.perf_counter(), time.process_time()
        for step in range(steps):
            hvd.allreduce(values, name=names[step % 3], process_set=my_set)
        rates[timeline].append(steps / (time.perf_counter() - start))
        if timeline:
            hvd.stop_timeline()  # writes what is left: the writer's work counts
        cpu[timeline].append((time.process_time() - start_cpu) / steps * 1e6)
    if my_set.rank() == 0:
        print(f"[{task}] RATES {json.dumps([rates[False], rates[True]])}", flush=True)
        print(f"[{task}] CPU {json.dumps([cpu[False], cpu[True]])}", flush=True)
    hvd.shutdown()


def horarun(np_, program, env, what):
    cmd = [sys.executable, "-m", "hora.runner", "-np", str(np_), sys.executable] + program
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{what} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    if "dropped" in out.stderr:
        print(f"note: the timeline dropped events: {out.stderr.strip()}", flush=True)
    return out.stdout


def timeline_bytes(out_dir):
    return sum(os.path.getsize(path) for path in glob.glob(os.path.join(out_dir, "timeline*.json")))


def clean_environment():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("HOROVOD_TIMELINE", "HORA_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES", "HORA_TIMELINE_MARK_CYCLES"):
        env.pop(name, None)
    return env


def multitask(np_, steps, repeats):
    """{task: ([rates without], [rates with])}, bytes of one run's timeline."""
    rates, written = {}, 0
    for repeat in range(repeats):
        for timeline in ((False, True) if repeat % 2 == 0 else (True, False)):
            with tempfile.TemporaryDirectory() as out_dir:
                env = clean_environment()
                if timeline:
                    env["HOROVOD_TIMELINE"] = os.path.join(out_dir, "timeline.json")
                program = [MULTITASK, "--steps", str(steps), "--out", os.path.join(out_dir, "multitask.png")]
                stdout = horarun(np_, program, env, "examples/multitask.py")
                written = max(written, timeline_bytes(out_dir))
            found = {m["task"]: float(m["rate"]) for m in FINAL_LINE.finditer(stdout)}
            if len(found) != 2:
                raise SystemExit(f"expected two tasks' final lines:\n{stdout}")
            for task, rate in found.items():
                rates.setdefault(task, ([], []))[timeline].append(rate)
    return rates, written


def small_ops(np_, steps, pairs):
    """{task: ([rates without], [rates with])} of one job's blocks, bytes
    of the last block's timeline."""
    with tempfile.TemporaryDirectory() as out_dir:
        program = [os.path.abspath(__file__), "--worker", "--steps", str(steps), "--repeats", str(pairs),
                   "--timeline", os.path.join(out_dir, "timeline.json")]
        stdout = horarun(np_, program, clean_environment(), "small-ops")
        written = timeline_bytes(out_dir)
    found = {m["task"]: tuple(json.loads(m["rates"])) for m in BLOCK_RATES.finditer(stdout)}
    cpu = {m["task"]: tuple(json.loads(m["cpu"])) for m in BLOCK_CPU.finditer(stdout)}
    if len(found) != 2 or len(cpu) != 2:
        raise SystemExit(f"expected two sets' rates:\n{stdout}")
    return found, written, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("multitask", "small-ops"), default="multitask")
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--steps", type=int, help="steps per job (multitask, 300) or ops per block (small-ops, 2000)")
    parser.add_argument("--repeats", type=int, help="jobs each way (multitask, 5) or pairs of blocks (small-ops, 20)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeline", help=argparse.SUPPRESS)
    args = parser.parse_args()
    is_multitask = args.workload == "multitask"
    steps = args.steps or (300 if is_multitask else 2000)
    repeats = args.repeats or (5 if is_multitask else 20)
    if args.worker:
        small_ops_worker(steps, repeats, args.timeline)
        return

    load = os.getloadavg()[0]
    cpu = {}
    if is_multitask:
        rates, written = multitask(args.np, steps, repeats)
    else:
        rates, written, cpu = small_ops(args.np, steps, repeats)
    unit = "steps/s" if is_multitask else "ops/s"
    runs = f"{repeats} jobs each way" if is_multitask else f"{repeats} pairs of blocks of {steps} ops"
    print(f"{args.workload}, {args.np} ranks, {runs}; load average before: {load:.1f}")
    print(f"{'task':>20} {'no timeline (range)':>24} {'timeline (range)':>24} {'with/without (quartiles)':>26}")
    for task, (off, on) in sorted(rates.items()):
        ratios = [a / b for a, b in zip(on, off)]
        low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        print(f"{task:>20} {statistics.median(off):>8.0f} {unit} ({min(off):.0f}-{max(off):.0f})"
              f" {statistics.median(on):>8.0f} {unit} ({min(on):.0f}-{max(on):.0f})"
              f" {statistics.median(ratios):>10.2f} ({low:.2f}-{high:.2f})")
    for task, (off, on) in sorted(cpu.items()):
        print(f"{task:>20} CPU time of the set's first rank per op (all its threads): "
              f"{statistics.median(off):.1f} us without, {statistics.median(on):.1f} us with the timeline")
    print(f"a timeline file: {written / 1e6:.2f} MB", flush=True)


if __name__ == "__main__":
    main()
