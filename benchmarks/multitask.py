"""Training speed of examples/multitask.py (two tasks, sets [0, 2] and
[1, 3], each with its own DistributedOptimizer) with hora's shared-memory
path on and off (HORA_SHM=0), in the same run.

    python benchmarks/multitask.py                     # 4 ranks, 300 steps, 1 run each
    python benchmarks/multitask.py --steps 600 --repeats 3

Runs the example unchanged under horarun (its --steps and --out options;
the PNG goes to a temporary folder) and reads the "N steps/s" each task
prints on its final line. Prints, per task, the steps per second with
shared memory and without (median over the repeats), their ratio (above 1:
shared memory is faster) and each job's wall time. Not a test.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "multitask.py")
FINAL_LINE = re.compile(r"\[(?P<task>[^\]]+)\] final: .*, (?P<rate>[0-9.]+) steps/s")
MODES = {"hora": {}, "hora-noshm": {"HORA_SHM": "0"}}


def run_example(np_, steps, extra_env):
    """({task: steps per second}, wall seconds) of one run of the example."""
    with tempfile.TemporaryDirectory() as out_dir:
        cmd = [sys.executable, "-m", "hora.runner", "-np", str(np_), sys.executable, EXAMPLE,
               "--steps", str(steps), "--out", os.path.join(out_dir, "multitask.png")]
        env = dict(os.environ, OMP_NUM_THREADS="1", **extra_env)
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
        wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"examples/multitask.py failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    rates = {m["task"]: float(m["rate"]) for m in FINAL_LINE.finditer(out.stdout)}
    if len(rates) != 2:
        raise SystemExit(f"expected two tasks' final lines:\n{out.stdout}")
    return rates, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    rates, walls = {}, {}
    for _ in range(args.repeats):
        for mode, extra_env in MODES.items():
            run_rates, wall = run_example(args.np, args.steps, extra_env)
            for task, rate in run_rates.items():
                rates.setdefault((mode, task), []).append(rate)
            walls.setdefault(mode, []).append(wall)
    tasks = sorted({task for _, task in rates})
    print(f"examples/multitask.py, {args.np} ranks, {args.steps} steps (median of {args.repeats})")
    print(f"{'task':>20} {'hora':>12} {'HORA_SHM=0':>12} {'hora/noshm':>11}")
    for task in tasks:
        on = statistics.median(rates["hora", task])
        off = statistics.median(rates["hora-noshm", task])
        print(f"{task:>20} {on:>6.0f} step/s {off:>6.0f} step/s {on / off:>10.2f}x")
    print(f"{'job wall time':>20} {statistics.median(walls['hora']):>10.1f} s "
          f"{statistics.median(walls['hora-noshm']):>10.1f} s", flush=True)


if __name__ == "__main__":
    main()
