"""Whether one process set slows another down on a rank they share, hora
beside torch.distributed (Gloo groups) in the same run.

    python benchmarks/interference.py                  # 3 ranks, 2 s per phase
    python benchmarks/interference.py --seconds 5 --load-bytes 67108864

Peers: hora (shared memory, the default), hora-noshm (HORA_SHM=0) and torch.
Set (group) A holds ranks [0, 1] and set B ranks [0, 2]: they share rank 0
(a set over exactly the ranks of another is refused, as on Horovod). B's
members time B's 4-byte allreduce (Sum, float32) back to back for --seconds
alone, then as long again while A keeps float32 allreduces of --load-bytes
(16 MiB) going, on rank 0 from another thread of the same process: long
enough for the scheduler to settle how the four busy threads (two on rank 0)
share the two cores (a phase of a few milliseconds sees only how it happened
to start). A member that is done adds 0 instead of 1 to B's sum, and a Min
over a flag in A's first element does the same for A, so the members of
each set stop after the same op.

Prints per peer the median of B's slowest member alone and under A's load,
their ratio (loaded / alone: 1.0 means A costs B nothing; issue 11's target
is at most 1.5) and A's bus bandwidth while B ran; then each other peer's
loaded latency over hora's (above 1: hora is faster). Not a test.
"""

import argparse
import os
import statistics
import sys
import threading
import time

from jobs import NO_SHM, free_port, print_result, run_job


def latencies(op, buffer, ranks, seconds):
    """Times op() (an in-place Sum allreduce of `buffer` over `ranks`) until
    `seconds` have passed on some rank; every rank stops after the same op."""
    samples, end = [], time.perf_counter() + seconds
    while True:
        buffer[0] = 1 if time.perf_counter() < end else 0
        start = time.perf_counter()
        op()
        samples.append(time.perf_counter() - start)
        if buffer[0] < ranks:
            return samples


class Load:
    """A thread that runs `op(buffer)` (an in-place Min allreduce in A) until
    stop(); the rank whose flag is 0 in buffer[0] ends it for both."""

    def __init__(self, op, buffer):
        self._op, self._buffer = op, buffer
        self._stop = threading.Event()
        self._running = threading.Event()
        self.ops, self.seconds = 0, 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        start = time.perf_counter()
        while True:
            self._buffer[0] = 0 if self._stop.is_set() else 1
            self._op(self._buffer)
            self.ops += 1
            if self.ops == 2:
                self._running.set()
            if self._buffer[0] == 0:
                break
        self.seconds = time.perf_counter() - start
        self._running.set()

    def __enter__(self):
        self._thread.start()
        self._running.wait()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def measure(rank, small_op, small, big_op, big, seconds):
    """What `rank` measures: B's latency alone and loaded (ranks 0 and 2, the
    members of B) and A's time per op while B runs (rank 0)."""
    result = {}
    if rank in (0, 2):
        for _ in range(20):
            small_op()
    if rank in (0, 1):
        big_op(big)
    if rank == 1:
        # A's other member keeps A's load going until rank 0 ends it (rank 0
        # times it: this one also waits out B's phase alone).
        with Load(big_op, big):
            pass
        return {}
    alone = latencies(small_op, small, 2, seconds)
    if rank == 0:
        with Load(big_op, big) as load:
            loaded = latencies(small_op, small, 2, seconds)
        result["load_op_seconds"] = load.seconds / max(load.ops, 1)
    else:
        loaded = latencies(small_op, small, 2, seconds)
    result.update(alone=statistics.median(alone), loaded=statistics.median(loaded))
    return result


def worker_hora(seconds, load_bytes):
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    set_a, set_b = hvd.add_process_set([0, 1]), hvd.add_process_set([0, 2])
    small, big = np.ones(1, dtype=np.float32), np.ones(load_bytes // 4, dtype=np.float32)
    result = measure(hvd.rank(), lambda: hvd.allreduce_(small, op=hvd.Sum, name="small", process_set=set_b),
                     small,
                     lambda buffer: hvd.allreduce_(buffer, op=hvd.Min, name="load", process_set=set_a),
                     big, seconds)
    hvd.shutdown()
    return result


def worker_torch(seconds, load_bytes, port):
    import torch
    import torch.distributed as dist

    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    group_a, group_b = dist.new_group([0, 1]), dist.new_group([0, 2])
    small, big = torch.ones(1, dtype=torch.float32), torch.ones(load_bytes // 4, dtype=torch.float32)
    result = measure(rank, lambda: dist.all_reduce(small, group=group_b), small,
                     lambda buffer: dist.all_reduce(buffer, op=dist.ReduceOp.MIN, group=group_a),
                     big, seconds)
    dist.destroy_process_group()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each phase times B's op")
    parser.add_argument("--load-bytes", type=int, default=16 << 20, help="size of each allreduce in A")
    parser.add_argument("--peers", default="hora,hora-noshm,torch",
                        help="comma-separated, from hora, hora-noshm, torch")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, not {args.seconds:g}")

    if args.worker:
        if args.worker == "torch":
            print_result(worker_torch(args.seconds, args.load_bytes, args.port))
        else:
            print_result(worker_hora(args.seconds, args.load_bytes))
        return

    peers = args.peers.split(",")
    measured = {}
    for peer in peers:
        argv = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--seconds", str(args.seconds),
                "--load-bytes", str(args.load_bytes), "--port", str(free_port())]
        per_rank = run_job(3, argv, NO_SHM if peer == "hora-noshm" else None, what=f"{peer} interference")
        measured[peer] = {key: max(r[key] for r in per_rank if key in r)
                          for key in ("alone", "loaded", "load_op_seconds")}   # A's: rank 0's alone
    print(f"set B [0, 2]: 4-byte allreduce; set A [0, 1]: {args.load_bytes >> 20} MiB allreduces, on rank 0 in "
          f"another thread (median over {args.seconds:g} s each, B's slowest member)")
    print(f"{'peer':>10} {'B alone':>10} {'B loaded':>10} {'loaded/alone':>13} {'A busbw':>11} {'loaded/hora':>12}")
    for peer in peers:
        m = measured[peer]
        busbw = args.load_bytes / m["load_op_seconds"] / 1e9   # 2(n-1)/n = 1 at 2 ranks
        versus = f"{m['loaded'] / measured['hora']['loaded']:.2f}x" if "hora" in measured else "-"
        print(f"{peer:>10} {m['alone'] * 1e3:>7.3f} ms {m['loaded'] * 1e3:>7.3f} ms {m['loaded'] / m['alone']:>12.2f}x"
              f" {busbw:>6.2f} GB/s {versus:>12}", flush=True)


if __name__ == "__main__":
    main()
