"""Which CPUs hora leaves this rank's threads: every thread is checked after
init, a thread started then too, and every thread again after shutdown.
Arguments: the layout of the hosts the ranks claim (blocks or interleaved,
as workers/claimed_hosts.py makes them; one: a single host) and what to
expect: placed (where the job's ranks outnumber this machine's CPUs and
nothing narrowed this process's, each rank on the CPU of its place: a
host's ranks together, hosts in the order of their lowest rank; elsewhere
untouched) or untouched. Prints "rank R on CPUS ok"."""

import os
import sys
import threading

import hora.numpy as hvd

layout, expect = sys.argv[1], sys.argv[2]


def threads_cpus():
    """{thread id: its CPUs} for every thread of this process."""
    cpus = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
        except ProcessLookupError:  # exited meanwhile
            pass
    return cpus


before = frozenset(os.sched_getaffinity(0))
hvd.init()
rank, size = hvd.rank(), hvd.size()
online = os.cpu_count()
wanted = before
if expect == "placed" and size > online and len(before) == online:
    host = {"blocks": lambda r: r // 2, "interleaved": lambda r: r % 2}[layout]
    order = sorted(range(size), key=lambda r: (host(r), r))
    cpus = sorted(before)
    wanted = frozenset([cpus[order.index(rank) * len(cpus) // size]])

placed = threads_cpus()
assert set(placed.values()) == {wanted}, f"rank {rank}: threads on {placed}, expected {sorted(wanted)}"
started = []
thread = threading.Thread(target=lambda: started.append(frozenset(os.sched_getaffinity(0))))
thread.start()
thread.join()
assert started == [wanted], f"rank {rank}: a thread started after init ran on {started}, expected {sorted(wanted)}"
# A collective still gives the sum with the ranks where they are.
assert hvd.allreduce(1.0, op=hvd.Sum) == size

hvd.shutdown()
after = threads_cpus()
assert set(after.values()) == {before}, f"rank {rank}: after shutdown threads on {after}, expected {sorted(before)}"
print(f"rank {rank} on {sorted(wanted)} ok", flush=True)
