"""What one task's failure costs the others: hora beside torch.distributed
(Gloo process groups), measured in the same run on the same machine.

    python benchmarks/fault_domains.py              # 3 repeats, 200 steps
    python benchmarks/fault_domains.py --repeats 5 --steps 400

Four ranks; sets (process groups) A=[0, 1] and B=[2, 3] each train a linear
model by data-parallel SGD, averaging gradients every step. At step 15 rank 1
is SIGKILLed ("kill") or SIGSTOPped ("stop", a hang); "none" is the run
without a failure. Both peers run with a 3 s op timeout (hora:
HORA_OP_TIMEOUT_SECONDS, torch: init_process_group(timeout=...)) and the
job under horarun --keep-going, so that a launcher never ends the survivors.

Reported per mode, as the median over the repeats:
- detect: seconds from the failure to the error on rank 0 (A's survivor);
  "-" when rank 0 got no error (it finished or was itself stuck);
- B: B's training time, and its ratio over B's time in "none" (1.00: B did
  not notice);
- B done: whether both of B's ranks finished training.
Not a test: it prints a table.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TESTS = os.path.join(REPO, "tests", "python")
HORA_WORKER = os.path.join(TESTS, "workers", "fault_domains.py")
sys.path.insert(0, TESTS)
from fault_checks import results_of  # noqa: E402  (the workers' RESULT lines)
OP_TIMEOUT_SECONDS = 3
MODES = ("none", "kill", "stop")

# The torch.distributed peer: the same training as HORA_WORKER on Gloo
# process groups, printing the same RESULT line.
TORCH_WORKER = r'''
import datetime, json, os, signal, sys, time
import numpy as np, torch, torch.distributed as dist
mode, outdir, port, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
FAIL_STEP, ROWS, FEATURES, LR = 15, 4000, 32, 0.05
me, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
timeout = datetime.timedelta(seconds=float(os.environ["OP_TIMEOUT_SECONDS"]))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=me, world_size=size, timeout=timeout)
a, b = dist.new_group([0, 1], timeout=timeout), dist.new_group([2, 3], timeout=timeout)
group, set_id, set_rank = (a, 1, me) if me < 2 else (b, 2, me - 2)
rng = np.random.default_rng(1000 * set_id + set_rank)
truth = np.random.default_rng(set_id).normal(size=FEATURES)
x = rng.normal(size=(ROWS, FEATURES)); y = x @ truth + 0.01 * rng.normal(size=ROWS)
event = os.path.join(outdir, "event.json")
w, result = np.zeros(FEATURES), {"rank": me}
start = time.perf_counter()
try:
    for step in range(steps):
        if step == FAIL_STEP and mode != "none" and me == 1:
            with open(event + ".tmp", "w") as f:
                json.dump({"time": time.time(), "pid": os.getpid()}, f)
            os.replace(event + ".tmp", event)
            os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        grad = torch.from_numpy(x.T @ (x @ w - y) / ROWS)
        dist.all_reduce(grad, group=group)
        w -= LR * grad.numpy() / 2
    result["train_seconds"] = time.perf_counter() - start
except Exception as error:
    with open(event) as f:
        result["set_failure"] = {"message": str(error)[:200], "after_event_seconds": time.time() - json.load(f)["time"]}
    if mode == "stop" and me == 0:
        with open(event) as f:
            os.kill(json.load(f)["pid"], signal.SIGCONT)
print("RESULT " + json.dumps(result), flush=True)
os._exit(0)  # a broken group can hang torch's own teardown
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(peer, mode, steps, worker_file):
    """{rank: RESULT dict} of one job."""
    with tempfile.TemporaryDirectory() as outdir:
        if peer == "hora":
            args = [HORA_WORKER, mode, outdir]
        else:
            args = [worker_file, mode, outdir, str(free_port()), str(steps)]
        cmd = [sys.executable, "-m", "hora.runner", "--keep-going", "-np", "4", sys.executable] + args
        env = dict(os.environ, HORA_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_SECONDS),
                   OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_SECONDS), FAULT_STEPS=str(steps), OMP_NUM_THREADS="1")
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO,
                             timeout=120 + 2 * OP_TIMEOUT_SECONDS)
    return results_of(run)


def summarise(runs):
    detect = [r[0]["set_failure"]["after_event_seconds"] for r in runs if "set_failure" in r.get(0, {})]
    b_times = [max(r[k]["train_seconds"] for k in (2, 3)) for r in runs
               if all("train_seconds" in r.get(k, {}) for k in (2, 3))]
    return {"detect": statistics.median(detect) if detect else None,
            "b": statistics.median(b_times) if b_times else None,
            "b_done": f"{len(b_times)}/{len(runs)}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    options = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(TORCH_WORKER)
        torch_worker = f.name
    try:
        table = {}
        for mode in MODES:
            for peer in ("hora", "torch"):
                runs = [run_once(peer, mode, options.steps, torch_worker) for _ in range(options.repeats)]
                table[peer, mode] = summarise(runs)
    finally:
        os.unlink(torch_worker)
    print(f"rank 1 of A=[0,1] fails at step 15; B=[2,3] trains {options.steps} steps; "
          f"op timeout {OP_TIMEOUT_SECONDS} s; median of {options.repeats}")
    print(f"{'peer':>6} {'mode':>5} {'detect':>9} {'B time':>9} {'B/none':>7} {'B done':>7}")
    for (peer, mode), row in table.items():
        base = table[peer, "none"]["b"]
        detect = f"{row['detect']:.2f} s" if row["detect"] is not None else "-"
        b_time = f"{row['b']:.2f} s" if row["b"] is not None else "-"
        ratio = f"{row['b'] / base:.2f}" if row["b"] and base else "-"
        print(f"{peer:>6} {mode:>5} {detect:>9} {b_time:>9} {ratio:>7} {row['b_done']:>7}")


if __name__ == "__main__":
    main()
