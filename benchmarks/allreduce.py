"""Allreduce latency and bus bandwidth: hora beside torch.distributed (Gloo)
and, on the MPI backend, beside plain MPI_Allreduce (mpi4py), measured in the
same run on the same machine. hora-core is hora's C++ core with no front end
(build/hora_core_bench, from benchmarks/core_allreduce.cc; `make cpp` builds it).

    python benchmarks/allreduce.py                # 2 and 4 ranks, 4 B .. 64 MiB
    python benchmarks/allreduce.py --np 4 --max-bytes 1048576
    python benchmarks/allreduce.py --backend mpi  # hora on MPI, mpi4py, torch
    python benchmarks/allreduce.py --np 2 --peers hora,hora-noshm,torch   # shared memory on and off
    python benchmarks/allreduce.py --np 2 --peers hora,hora-core,mpi4py   # the core alone (C++, no Python)
    python benchmarks/allreduce.py --np 2 --peers hora,hora-core,shm-floor  # beside the machine's floor

shm-floor (build/hora_shm_floor, from benchmarks/shm_floor.cc) is the same
shared-memory data movement with nothing around it, forked processes
spinning on counters: the floor this machine allows at that moment, which on
a shared virtual machine moves several-fold from minute to minute (it spins
without end, so it runs only where every rank has a CPU of its own).

Each peer runs as its own job under horarun; every rank times in-place
float32 allreduces (Sum) for about a quarter of a second per size (at least
200 ops up to 16 KiB, 30 up to 4 MiB, 6 above) after a warm-up of a fifth
as many, and the slowest rank's median per size is taken. Every peer runs
--rounds times (3), in an order that rotates from round to round, and the
median over rounds is reported. Bus bandwidth = bytes * 2(n-1)/n / time, as
nccl-tests define it. hora on MPI and mpi4py run under mpirun (horarun --mpi), the others
under horarun. Not a test: it prints a table and, for each other peer, its
time over hora's (above 1: hora is faster).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4 << (4 * i) for i in range(7)]  # 4 B, 64 B, 1 KiB, 16 KiB, 256 KiB, 4 MiB, 64 MiB


def iterations(nbytes):
    """The fewest ops a size is timed over."""
    if nbytes <= 16 << 10:
        return 200
    if nbytes <= 4 << 20:
        return 30
    return 6


# A size is timed over about SIZE_SECONDS of ops (at least iterations(),
# at most MOST_ITERATIONS), after a warm-up of a fifth as many. 200 ops of 4
# bytes right after start-up last 2-3 ms: a figure of the scheduler's first
# placement of the ranks (two ranks that start on one CPU stay there for
# tens of milliseconds, docs/performance.md, "Steady state, not start-up"),
# not of the steady state a training job runs in.
SIZE_SECONDS = 0.25
MOST_ITERATIONS = 20000
CALIBRATION = 10


def like(buf, values):
    """A new 1-D buffer of `buf`'s kind and type holding `values`."""
    if hasattr(buf, "new_tensor"):  # torch
        return buf.new_tensor(values)
    import numpy as np

    return np.array(values, dtype=buf.dtype)


def ops_to_time(allreduce_, buf, nbytes):
    """How many ops to time, the same on every rank: each rank's time per op
    over a few ops, averaged over the ranks through the peer's own
    allreduce."""
    start = time.perf_counter()
    for _ in range(CALIBRATION):
        allreduce_(buf)
    took_and_one = like(buf, [(time.perf_counter() - start) / CALIBRATION, 1.0])
    allreduce_(took_and_one)
    mean = float(took_and_one[0]) / float(took_and_one[1])
    return int(min(max(iterations(nbytes), SIZE_SECONDS / max(mean, 1e-9)), MOST_ITERATIONS))


def time_loop(allreduce_, buffers, nbytes):
    buf = buffers[nbytes]
    count = ops_to_time(allreduce_, buf, nbytes)
    for _ in range(count // 5):
        allreduce_(buf)
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        allreduce_(buf)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def worker_hora(sizes):
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    buffers = {n: np.ones(max(n // 4, 1), dtype=np.float32) for n in sizes}
    results = {n: time_loop(lambda b: hvd.allreduce_(b, op=hvd.Sum, name="bench"), buffers, n) for n in sizes}
    hvd.shutdown()
    return results


def worker_torch(sizes, port, host="127.0.0.1"):
    import torch
    import torch.distributed as dist

    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=size)
    buffers = {n: torch.ones(max(n // 4, 1), dtype=torch.float32) for n in sizes}
    results = {n: time_loop(lambda b: dist.all_reduce(b), buffers, n) for n in sizes}
    dist.destroy_process_group()
    return results


def worker_mpi4py(sizes):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buffers = {n: np.ones(max(n // 4, 1), dtype=np.float32) for n in sizes}
    results = {n: time_loop(lambda b: comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM), buffers, n) for n in sizes}
    return results


# hora-noshm: hora with its shared-memory path off (HORA_SHM=0).
WORKERS = {"hora": worker_hora, "hora-noshm": worker_hora, "mpi4py": worker_mpi4py}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def built_program(name, peer):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", name)
    if not os.path.exists(path):
        raise SystemExit(f"{peer} needs {path}: run `make cpp` first")
    return path


def run_peer(peer, np_, sizes, backend):
    # hora on MPI and mpi4py run under mpirun; hora on Gloo and torch under
    # horarun; the floor forks its own processes.
    hora = peer.startswith("hora")
    through_mpi = peer == "mpi4py" or (hora and backend == "mpi")
    launcher = ["--mpi"] if through_mpi else []
    program = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--port", str(free_port())]
    if peer == "hora-core":
        program = [built_program("hora_core_bench", peer)]
    cmd = [sys.executable, "-m", "hora.runner"] + launcher + ["-np", str(np_)] + program + [
        "--sizes", ",".join(map(str, sizes))]
    if peer == "shm-floor":
        cmd = [built_program("hora_shm_floor", peer), "--np", str(np_), "--sizes", ",".join(map(str, sizes))]
    env = dict(os.environ, HORA_BACKEND=backend) if hora else None
    if peer == "hora-noshm":
        env["HORA_SHM"] = "0"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{peer} on {np_} ranks failed:\n{out.stdout}\n{out.stderr}")
    # Each rank prints one {"RESULT": ...}; a launcher may prefix or join lines.
    decoder, text, per_rank = json.JSONDecoder(), out.stdout, []
    start = text.find('{"RESULT"')
    while start >= 0:
        result, end = decoder.raw_decode(text, start)
        per_rank.append(result["RESULT"])
        start = text.find('{"RESULT"', end)
    if peer == "shm-floor":
        per_rank *= np_   # one line for all processes: the slowest one's medians
    if len(per_rank) != np_:
        raise SystemExit(f"{peer} on {np_} ranks printed {len(per_rank)} results:\n{out.stdout}")
    return {n: max(r[str(n)] for r in per_rank) for n in sizes}


def human(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024:
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return f"{nbytes:g} TiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--backend", choices=("gloo", "mpi"), default="gloo", help="hora's backend")
    parser.add_argument("--peers", help="comma-separated, from hora, hora-noshm, hora-core, shm-floor, torch, mpi4py "
                                        "(default: hora,torch; with --backend mpi: hora,mpi4py,torch)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every peer this many times, in rotating order; report the median (default 3)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        sizes = [int(s) for s in args.sizes.split(",")]
        worker = WORKERS.get(args.worker)
        results = worker(sizes) if worker else worker_torch(sizes, args.port)
        print(json.dumps({"RESULT": {str(k): v for k, v in results.items()}}), flush=True)
        return

    sizes = [n for n in SIZES if n <= args.max_bytes]
    peers = (args.peers or ("hora,mpi4py,torch" if args.backend == "mpi" else "hora,torch")).split(",")
    others = [p for p in peers if p != "hora"] if "hora" in peers else []
    cpus = len(os.sched_getaffinity(0))
    for np_ in args.np:
        here = [p for p in peers if p != "shm-floor" or np_ <= cpus]
        if here != peers:
            print(f"\nshm-floor left out at {np_} ranks: it spins, and there are {cpus} CPUs")
        # Rounds, each running every peer once, in an order that rotates: on a
        # shared machine whose speed drifts, each peer then meets the same
        # moments, and the median over rounds is what a peer is given.
        rounds = {peer: [] for peer in here}
        for r in range(args.rounds):
            for peer in here[r % len(here):] + here[:r % len(here)]:
                rounds[peer].append(run_peer(peer, np_, sizes, args.backend))
        measured = {peer: {n: statistics.median(x[n] for x in rounds[peer]) for n in sizes} for peer in here}
        print(f"\nallreduce float32 Sum, {np_} ranks, hora on {args.backend} (median of the slowest rank, "
              f"median of {args.rounds} rounds)")
        header = f"{'size':>9}" + "".join(f" {p + ' time':>14} {p + ' busbw':>12}" for p in here)
        header += "".join(f" {p + '/hora':>11}" for p in others if p in here)
        print(header)
        for n in sizes:
            row = f"{human(n):>9}"
            for p in here:
                t = measured[p][n]
                busbw = n * 2 * (np_ - 1) / np_ / t / 1e9
                row += f" {t * 1e6:>11.1f} us {busbw:>8.3f} GB/s"
            for p in others:
                if p in here:
                    row += f" {measured[p][n] / measured['hora'][n]:>10.2f}x"
            print(row, flush=True)


if __name__ == "__main__":
    main()
