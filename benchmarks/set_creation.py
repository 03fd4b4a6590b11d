"""How long a new process set takes to be usable: from the call that makes
it to the end of its first allreduce, for hora beside torch.distributed and
MPI, measured in the same run on the same machine.

    python benchmarks/set_creation.py                  # world 3, 4, 8; 10 repeats
    python benchmarks/set_creation.py --np 2 4 --repeats 20 --peers hora,torch

Peers: hora (shared memory on one host, the default), hora-noshm (hora with
HORA_SHM=0: Gloo over TCP), torch (torch.distributed.new_group with
use_local_synchronization, Gloo; its groups are kept to the end, since in
torch 2.13 destroying one and making another over the same ranks hangs, and
so does a job that makes groups of different members this way) and mpi4py (MPI_Comm_create_group, under
mpirun; left out when mpirun or mpi4py is missing). Each peer is its own
job. In every repeat all ranks meet at a world barrier, then the members of
the new set make it (hora: add_process_set; torch: new_group; MPI:
Comm.Create_group) and run one 4-byte allreduce in it; non-members call
nothing. The time ends with that allreduce: hora then removes the set and
MPI frees the communicator, untimed. Two sets are timed, each in a job of its own: "pair", ranks
[0, 1], and "most", every rank but the last (a set of every rank is the
global set, which cannot be made again). The first repeat is a warm-up and not
counted.

Prints, per world size and set, the median over repeats of the slowest
member's time (hora also shows the add_process_set call alone) and each
other peer's time over hora's (above 1: hora is faster). Not a test.
"""

import argparse
import os
import statistics
import sys
import time

from jobs import NO_SHM, free_port, mpi_available, print_result, run_job

SET_KINDS = ("pair", "most")


def members_of(kind, size):
    """The set a repeat makes: ranks [0, 1], or every rank but the last (a
    set of every rank is the global set, which hora, as Horovod, refuses to
    make twice)."""
    return [0, 1] if kind == "pair" else list(range(size - 1))


def timed_repeats(repeats, barrier, make_and_use):
    """{"make": [...], "total": [...]} in seconds; make_and_use() returns
    (when its making step ended, when its first allreduce ended) as
    time.perf_counter() values, or None on a non-member. What it does after
    the allreduce (removing or freeing the set) is not timed."""
    made, total = [], []
    for repeat in range(repeats + 1):
        barrier()
        start = time.perf_counter()
        ends = make_and_use(repeat)
        if ends is not None and repeat > 0:
            made.append(ends[0] - start)
            total.append(ends[1] - start)
    return {"make": made, "total": total}


def worker_hora(kind, repeats):
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    buffer = np.ones(1, dtype=np.float32)
    members = members_of(kind, hvd.size())

    def make_and_use(_repeat):
        if hvd.rank() not in members:
            return None
        process_set = hvd.add_process_set(members)
        made = time.perf_counter()
        hvd.allreduce_(buffer, op=hvd.Sum, name="first", process_set=process_set)
        used = time.perf_counter()
        hvd.remove_process_set(process_set)
        return made, used

    result = timed_repeats(repeats, lambda: hvd.barrier(), make_and_use)
    hvd.shutdown()
    return result


def worker_torch(kind, repeats, port):
    import torch
    import torch.distributed as dist

    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    buffer = torch.ones(1, dtype=torch.float32)
    groups = []
    members = members_of(kind, size)

    def make_and_use(_repeat):
        if rank not in members:
            return None
        group = dist.new_group(members, use_local_synchronization=True)
        made = time.perf_counter()
        dist.all_reduce(buffer, group=group)
        used = time.perf_counter()
        groups.append(group)   # destroying one and making the next over the same ranks hangs
        return made, used

    result = timed_repeats(repeats, dist.barrier, make_and_use)
    dist.destroy_process_group()
    return result


def worker_mpi4py(kind, repeats):
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    buffer = np.ones(1, dtype=np.float32)
    members = members_of(kind, world.Get_size())
    group = world.Get_group().Incl(members)

    def make_and_use(repeat):
        if world.Get_rank() not in members:
            return None
        comm = world.Create_group(group, tag=repeat)
        made = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        used = time.perf_counter()
        comm.Free()
        return made, used

    result = timed_repeats(repeats, world.Barrier, make_and_use)
    group.Free()
    return result


def run_peer(peer, kind, np_, repeats):
    """{"make": s, "total": s}: per member the median, then the slowest member."""
    argv = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--kind", kind,
            "--repeats", str(repeats), "--port", str(free_port())]
    per_rank = run_job(np_, argv, NO_SHM if peer == "hora-noshm" else None, mpi=peer == "mpi4py",
                       what=f"{peer} set creation ({kind})")
    members = [r for r in per_rank if r["total"]]
    return {key: max(statistics.median(r[key]) for r in members) for key in ("make", "total")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, nargs="*", default=[3, 4, 8], help="world sizes (3 or more)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--peers", help="comma-separated, from hora, hora-noshm, torch, mpi4py "
                                        "(default: all of them; mpi4py only where it can run)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=SET_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        workers = {"hora": worker_hora, "hora-noshm": worker_hora, "mpi4py": worker_mpi4py}
        worker = workers.get(args.worker)
        if worker is None:
            print_result(worker_torch(args.kind, args.repeats, args.port))
        else:
            print_result(worker(args.kind, args.repeats))
        return

    default = "hora,hora-noshm,torch" + (",mpi4py" if mpi_available() else "")
    peers = (args.peers or default).split(",")
    others = [p for p in peers if p != "hora"] if "hora" in peers else []
    print(f"set creation: make the set + first 4-byte allreduce in it (median of {args.repeats}, "
          "slowest member)")
    header = f"{'world':>5} {'set':>4}" + (f" {'hora make':>10}" if "hora" in peers else "")
    header += "".join(f" {p:>11}" for p in peers) + "".join(f" {p + '/hora':>16}" for p in others)
    print(header, flush=True)
    for np_ in args.np:
        if np_ < 3:
            print(f"{np_:>5}  (skipped: in a world of {np_} every set of two or more ranks is the global set)")
            continue
        for kind in SET_KINDS:
            measured = {peer: run_peer(peer, kind, np_, args.repeats) for peer in peers}
            row = f"{np_:>5} {kind:>4}"
            if "hora" in peers:
                row += f" {measured['hora']['make'] * 1e3:>7.2f} ms"
            row += "".join(f" {measured[p]['total'] * 1e3:>8.2f} ms" for p in peers)
            row += "".join(f" {measured[p]['total'] / measured['hora']['total']:>15.3g}x"
                           for p in others)
            print(row, flush=True)


if __name__ == "__main__":
    main()
