"""What live process sets cost a rank in threads and file descriptors.

    python benchmarks/set_resources.py                 # 8 ranks, every set that holds rank 0
    python benchmarks/set_resources.py --np 4 --shm 0  # 4 ranks, Gloo over TCP

Every rank calls init(), then makes every process set of the job that holds
it (each subset of the ranks but the global set, in one order on every
rank; duplicates are refused, so a world of 8 gives rank 0 its 127 sets and
the global one: 128), runs one 4-byte allreduce in each, and counts its
threads (/proc/self/task) and open descriptors (/proc/self/fd) after init
and with every set live (right after the last op, and 2 s later, when
idle pool threads have gone). Prints, for rank 0 and for the busiest rank, the
live sets, the threads and descriptors before and after, and the increase
per set. Not a test: issue figures are targets, read off this table.
"""

import argparse
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jobs import print_result, run_job  # noqa: E402


def resources():
    return {"threads": len(os.listdir("/proc/self/task")), "fds": len(os.listdir("/proc/self/fd"))}


def worker():
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    buffer = np.ones(1, dtype=np.float32)
    hvd.allreduce_(buffer, op=hvd.Sum, name="first")
    before = resources()
    sets = []
    for count in range(1, size):
        for members in itertools.combinations(range(size), count):
            if rank in members:
                sets.append(hvd.add_process_set(list(members)))
    for process_set in sets:
        name = "use." + "-".join(map(str, process_set.ranks))
        hvd.allreduce_(buffer, op=hvd.Sum, name=name, process_set=process_set)
    after = resources()
    time.sleep(2.0)  # the progress pool lets threads idle for a second go
    settled = resources()
    hvd.barrier()
    for process_set in sets:
        hvd.remove_process_set(process_set)
    hvd.shutdown()
    return {"rank": rank, "sets": len(sets) + 1, "before": before, "after": after, "settled": settled}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=8)
    parser.add_argument("--shm", choices=("0", "1"), default="1", help="HORA_SHM for the job")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print_result(worker())
        return

    results = run_job(args.np, [sys.executable, os.path.abspath(__file__), "--worker"],
                      {"HORA_SHM": args.shm}, what="set resources")
    print(f"live sets per rank, {args.np} ranks, HORA_SHM={args.shm}; cores: {os.cpu_count()}")
    print(f"{'rank':>8} {'sets':>5} {'threads':>21} {'fds':>15} {'threads/set':>12} {'fds/set':>8}")
    busiest = max(results, key=lambda r: r["after"]["threads"])
    shown = [r for r in results if r["rank"] == 0] + ([busiest] if busiest["rank"] != 0 else [])
    for r in shown:
        grown = {k: (r["settled"][k] - r["before"][k]) / (r["sets"] - 1) for k in ("threads", "fds")}
        threads = f"{r['before']['threads']} -> {r['after']['threads']} -> {r['settled']['threads']}"
        print(f"{r['rank']:>8} {r['sets']:>5} {threads:>21} {r['before']['fds']:>6} -> {r['settled']['fds']:<5}"
              f" {grown['threads']:>12.2f} {grown['fds']:>8.2f}")
    print("threads: after init -> right after one op in every set -> 2 s later; per set: the growth by then")


if __name__ == "__main__":
    main()
