"""What hora.torch adds to a small op: the median latency of a 4-byte
allreduce through hora.torch beside the same allreduce through hora.numpy,
in one job.

    python benchmarks/torch_op_overhead.py                 # 2 ranks, 2000 iterations
    python benchmarks/torch_op_overhead.py --np 4 --iterations 500

Every rank times ``allreduce`` (Sum, one float32, out of place) after a
warm-up, in alternating blocks of iterations so that both front ends see
the same background load while neither one's ops trail into the other's
timing; the slowest rank's median is reported for each front end, and their ratio
(hora.torch over hora.numpy; 1.0: the torch front end adds nothing
measurable). Not a test: it prints the numbers.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WARM_UP = 200
BLOCK = 200       # timed iterations of one front end in a row
BLOCK_WARM_UP = 10  # untimed iterations that start each block


def median_latencies(allreduces, iterations):
    """{label: median seconds} of each of ``allreduces`` ({label: function}),
    ``iterations`` timed calls each, in alternating blocks."""
    for allreduce in allreduces.values():
        for _ in range(WARM_UP):
            allreduce()
    samples = {label: [] for label in allreduces}
    while any(len(times) < iterations for times in samples.values()):
        for label, allreduce in allreduces.items():
            for _ in range(BLOCK_WARM_UP):
                allreduce()
            for _ in range(min(BLOCK, iterations - len(samples[label]))):
                start = time.perf_counter()
                allreduce()
                samples[label].append(time.perf_counter() - start)
    return {label: statistics.median(times) for label, times in samples.items()}


def worker(iterations):
    import numpy as np
    import torch

    import hora.numpy as hnp
    import hora.torch as hvd

    hvd.init()
    tensor = torch.ones(1, dtype=torch.float32)
    array = np.ones(1, dtype=np.float32)
    result = median_latencies({
        "torch": lambda: hvd.allreduce(tensor, op=hvd.Sum, name="bench.torch"),
        "numpy": lambda: hnp.allreduce(array, op=hnp.Sum, name="bench.numpy"),
    }, iterations)
    hvd.shutdown()
    print(json.dumps({"RESULT": result}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--backend", choices=("gloo", "mpi"), default="gloo")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.iterations)
        return

    launcher = ["--mpi"] if args.backend == "mpi" else []
    cmd = [sys.executable, "-m", "hora.runner"] + launcher + ["-np", str(args.np), sys.executable,
           os.path.abspath(__file__), "--worker", "--iterations", str(args.iterations)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, HORA_BACKEND=args.backend))
    if out.returncode != 0:
        raise SystemExit(f"the benchmark job failed:\n{out.stdout}\n{out.stderr}")
    decoder, text, per_rank = json.JSONDecoder(), out.stdout, []
    start = text.find('{"RESULT"')
    while start >= 0:
        result, end = decoder.raw_decode(text, start)
        per_rank.append(result["RESULT"])
        start = text.find('{"RESULT"', end)
    if len(per_rank) != args.np:
        raise SystemExit(f"expected {args.np} results, got {len(per_rank)}:\n{out.stdout}")
    torch_median = max(r["torch"] for r in per_rank)
    numpy_median = max(r["numpy"] for r in per_rank)
    print(f"4-byte allreduce, {args.np} ranks on {args.backend}, median of {args.iterations} "
          f"(slowest rank)")
    print(f"  hora.torch  {torch_median * 1e6:9.1f} us")
    print(f"  hora.numpy  {numpy_median * 1e6:9.1f} us")
    print(f"  torch/numpy {torch_median / numpy_median:9.2f}x")


if __name__ == "__main__":
    main()
