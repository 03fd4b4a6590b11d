"""Two tasks on four ranks: sets [0, 2] and [1, 3] each doing small
allreduces at the same time, hora beside torch.distributed (two Gloo
groups) in the same run; and what a rank that waits costs the machine.

    python benchmarks/two_tasks.py                     # 1 KiB ops, 500 per rank
    python benchmarks/two_tasks.py --iterations 2000 --bytes 4096

Peers: hora (shared memory, the default), hora-noshm (HORA_SHM=0) and torch.
Every rank runs --iterations float32 allreduces (Sum) of --bytes in its own
set after a warm-up; per op the median and the mean (total time over
count) are reported, for the slowest rank. Then each set's lower rank
enters an allreduce that its partner joins --late seconds later; the
waiting rank's CPU use is its process CPU time (every thread) over the wall
time it waited, and the late rank's likewise while it slept (neither
should be above a few percent of a core). Ratios: each other peer's median
over hora's (above 1: hora is faster). Not a test.
"""

import argparse
import os
import statistics
import sys
import time

from jobs import NO_SHM, free_port, print_result, run_job


def measure(rank, allreduce, buffer, iterations, late, barrier):
    for _ in range(20):
        allreduce(buffer)
    barrier()
    samples = []
    begin = time.perf_counter()
    for _ in range(iterations):
        start = time.perf_counter()
        allreduce(buffer)
        samples.append(time.perf_counter() - start)
    mean = (time.perf_counter() - begin) / iterations
    barrier()
    # The lower member of each set waits; its partner comes `late` seconds later.
    cpu, wall = time.process_time(), time.perf_counter()
    if rank >= 2:
        time.sleep(late)
    allreduce(buffer)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"median": statistics.median(samples), "mean": mean,
            "waiting_cpu" if rank < 2 else "late_cpu": cpu / wall}


def worker_hora(iterations, nbytes, late):
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    even, odd = hvd.add_process_set([0, 2]), hvd.add_process_set([1, 3])
    my_set = even if hvd.rank() % 2 == 0 else odd
    buffer = np.ones(nbytes // 4, dtype=np.float32)
    result = measure(hvd.rank(), lambda b: hvd.allreduce_(b, op=hvd.Sum, name="task", process_set=my_set),
                     buffer, iterations, late, hvd.barrier)
    hvd.shutdown()
    return result


def worker_torch(iterations, nbytes, late, port):
    import torch
    import torch.distributed as dist

    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    even, odd = dist.new_group([0, 2]), dist.new_group([1, 3])
    group = even if rank % 2 == 0 else odd
    buffer = torch.ones(nbytes // 4, dtype=torch.float32)
    result = measure(rank, lambda b: dist.all_reduce(b, group=group), buffer, iterations, late, dist.barrier)
    dist.destroy_process_group()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--bytes", type=int, default=1024, help="size of each allreduce")
    parser.add_argument("--late", type=float, default=2.0, help="seconds the late rank sleeps")
    parser.add_argument("--peers", default="hora,hora-noshm,torch",
                        help="comma-separated, from hora, hora-noshm, torch")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        if args.worker == "torch":
            print_result(worker_torch(args.iterations, args.bytes, args.late, args.port))
        else:
            print_result(worker_hora(args.iterations, args.bytes, args.late))
        return

    peers = args.peers.split(",")
    measured = {}
    for peer in peers:
        argv = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--iterations", str(args.iterations),
                "--bytes", str(args.bytes), "--late", str(args.late), "--port", str(free_port())]
        per_rank = run_job(4, argv, NO_SHM if peer == "hora-noshm" else None, what=f"{peer} two tasks")
        measured[peer] = {key: max(r[key] for r in per_rank if key in r)
                          for key in ("median", "mean", "waiting_cpu", "late_cpu")}
    print(f"4 ranks, sets [0, 2] and [1, 3], {args.bytes}-byte allreduces at once (slowest rank of "
          f"{args.iterations}); CPU of a rank waiting {args.late:g} s for its partner")
    print(f"{'peer':>10} {'median/op':>10} {'mean/op':>10} {'waiting CPU':>12} {'late CPU':>9} {'median/hora':>12}")
    for peer in peers:
        m = measured[peer]
        versus = f"{m['median'] / measured['hora']['median']:.2f}x" if "hora" in measured else "-"
        print(f"{peer:>10} {m['median'] * 1e3:>7.3f} ms {m['mean'] * 1e3:>7.3f} ms {m['waiting_cpu'] * 100:>10.1f} %"
              f" {m['late_cpu'] * 100:>7.1f} % {versus:>12}", flush=True)


if __name__ == "__main__":
    main()
