"""Allreduce between hosts: hora beside MPI and torch.distributed on a
simulated cluster (scripts/cluster.sh: one network namespace per host, each
with its own host name, joined by a bridge), every peer in the same run.

    sudo python benchmarks/cross_host.py                         # 1+1 and 2+2, unshaped and 10 Gbit/s
    python benchmarks/cross_host.py --per-host 1 --rates none --max-bytes 262144
    python benchmarks/cross_host.py --peers hora,mpi4py --rounds 1

Peers, each its own job started through `horarun --launch-agent
"scripts/cluster.sh exec"` with PER_HOST ranks on each of two hosts:
- mpi4py: MPI_Allreduce (Open MPI over TCP) under mpirun, `--bind-to none`
  (Open MPI would put every simulated host's ranks on one core) and its TCP
  traffic on the cluster's subnet;
- torch: torch.distributed's Gloo, its store on the first host;
- hora: hora under horarun (its own TCP data plane between hosts, shared
  memory inside one);
- hora-gloo: the same with Gloo between hosts (HORA_BACKEND=gloo);
- hora-negotiated: hora with every op negotiated through the coordinator
  (HORA_AGREEMENT=negotiated: no agreement on repeated ops between hosts);
- hora-stream: hora with every member's records of repeated ops through the
  coordinator (HORA_AGREEMENT=stream), where hora agrees through the hosts'
  leaders (the same at 1+1);
- hora-mpi: hora under mpirun (MPI between hosts);
- hora-unplaced: hora with its ranks left where the kernel puts them
  (HORA_BIND=none; at 2+2 the four ranks outnumber this machine's CPUs,
  and hora places them, docs/performance.md, "Ranks placed on a crowded
  machine");
- floor: the machine's floor (build/hora_host_floor, benchmarks/host_floor.cc):
  the least work a two-host allreduce can do, the inputs already in shared
  memory, one TCP connection between the hosts' first ranks, waits that
  look and yield; what no library can beat on these hosts;
- floor-parts: the same floor with every member of a host owning a part of
  each chunk and exchanging it over a connection of its own with the member
  of the same local rank on the other host (Horovod's hierarchical shape).
Every rank times in-place float32 Sum allreduces for about a quarter of a
second per size after a warm-up (benchmarks/allreduce.py; the C++ core and
the floor time their own counts); a size's figure is the slowest rank's
median, and each peer's figure the median over --rounds runs in rotating
order. Beside them: the raw TCP round trip of 8
bytes between the two hosts (Python, TCP_NODELAY) and, under a rate limit,
the link's bound for a bandwidth-optimal allreduce (each host sends and
receives the whole buffer once: bytes * 8 / rate). Ratios are each peer's
time over hora's (above 1: hora is faster). Needs root; not a test.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLUSTER = os.path.join(REPO, "scripts", "cluster.sh")
# Apart from the clusters of tests/python/test_cluster.py (horat 10.232.0,
# horas 10.233.0) and training_step.py (horaw 10.234.0).
NAME, SUBNET = "horab", "10.235.0"
HOSTS = [f"{NAME}-host1", f"{NAME}-host2"]
ENV = dict(os.environ, HORA_CLUSTER=NAME, HORA_CLUSTER_SUBNET=SUBNET, OMP_NUM_THREADS="1")
AGENT = f"{CLUSTER} exec"
SIZES = [4, 256 << 10, 4 << 20, 64 << 20]
RATES = {"none": None, "10gbit": 10e9}

sys.path.insert(0, HERE)
from allreduce import built_program, worker_hora, worker_mpi4py, worker_torch  # noqa: E402
from jobs import free_port, run_job  # noqa: E402


def cluster(*args):
    return subprocess.run([CLUSTER, *args], env=ENV, check=True, capture_output=True, text=True).stdout


def round_trip():
    """The median of 2,000 8-byte TCP round trips from the second host to the first."""
    server = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
              "s.bind(('0.0.0.0',47001));s.listen();c,_=s.accept();"
              "c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
              "while True:\n d=c.recv(8)\n if not d: break\n c.sendall(d)")
    client = ("import socket,time,statistics;c=socket.create_connection(('%s',47001));"
              "c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1);t=[]\n"
              "for _ in range(2000):\n a=time.perf_counter();c.sendall(b'x'*8);c.recv(8);"
              "t.append(time.perf_counter()-a)\n"
              "print(statistics.median(t))") % HOSTS[0]
    serving = subprocess.Popen([CLUSTER, "exec", HOSTS[0], shlex.join([sys.executable, "-c", server])], env=ENV)
    try:
        for _ in range(50):
            out = subprocess.run([CLUSTER, "exec", HOSTS[1], shlex.join([sys.executable, "-c", client])],
                                 env=ENV, capture_output=True, text=True)
            if out.returncode == 0:
                return float(out.stdout)
            time.sleep(0.1)
        raise SystemExit(f"the round trip between the hosts failed:\n{out.stderr}")
    finally:
        serving.kill()


def run_peer(peer, per_host, sizes):
    launcher = ["--launch-agent", AGENT, "-H", ",".join(f"{h}:{per_host}" for h in HOSTS)]
    if peer in ("mpi4py", "hora-mpi"):
        launcher += ["--mpi-args", f"--bind-to none --mca btl_tcp_if_include {SUBNET}.0/24 "
                                   f"--mca oob_tcp_if_include {SUBNET}.0/24"]
    argv = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--port", str(free_port()),
            "--sizes", ",".join(map(str, sizes))]
    if peer.startswith("floor"):
        argv = [built_program("hora_host_floor", peer), "--peer", HOSTS[0], "--port", str(free_port()),
                "--sizes", ",".join(map(str, sizes))] + (["--every-member"] if peer == "floor-parts" else [])
    cluster_env = {k: ENV[k] for k in ("HORA_CLUSTER", "HORA_CLUSTER_SUBNET")}
    backend = {"hora-mpi": "mpi", "hora-gloo": "gloo"}.get(peer, "tcp")
    agreement = {"hora-negotiated": "negotiated", "hora-stream": "stream"}.get(peer, "leaders")
    bind = "none" if peer == "hora-unplaced" else "auto"
    per_rank = run_job(2 * per_host, argv,
                       dict(cluster_env, HORA_BACKEND=backend, HORA_AGREEMENT=agreement, HORA_BIND=bind),
                       mpi=peer in ("mpi4py", "hora-mpi"), timeout=1800, launcher_args=launcher, cwd=REPO,
                       what=f"{peer} on {per_host}+{per_host} ranks")
    return {n: max(r[str(n)] for r in per_rank) for n in sizes}


def human(nbytes):
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return f"{nbytes:g} GiB"


def fmt(seconds):
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-host", type=int, nargs="*", default=[1, 2], help="ranks on each host")
    parser.add_argument("--rates", nargs="*", default=list(RATES), choices=list(RATES), help="link limits")
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--peers", default="hora,hora-mpi,mpi4py,torch",
                        help="comma-separated, from hora, hora-gloo, hora-negotiated, hora-stream, hora-mpi, "
                             "hora-unplaced, mpi4py, torch, floor, floor-parts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        sizes = [int(s) for s in args.sizes.split(",")]
        if args.worker == "torch":
            results = worker_torch(sizes, args.port, HOSTS[0])
        elif args.worker == "mpi4py":
            results = worker_mpi4py(sizes)
        else:
            results = worker_hora(sizes)
        print(json.dumps({"RESULT": {str(k): v for k, v in results.items()}}), flush=True)
        return

    if os.geteuid() != 0:
        raise SystemExit("cross_host.py makes network namespaces: run it as root")
    peers = args.peers.split(",")
    sizes = [n for n in SIZES if n <= args.max_bytes]
    try:
        for rate in args.rates:
            cluster("up", "2", *([rate] if RATES[rate] else []))
            print(f"\n2 simulated hosts, link {'unlimited' if rate == 'none' else rate}; "
                  f"raw TCP round trip {fmt(round_trip())}", flush=True)
            for per_host in args.per_host:
                rounds = {peer: [] for peer in peers}
                for r in range(args.rounds):
                    for peer in peers[r % len(peers):] + peers[:r % len(peers)]:
                        rounds[peer].append(run_peer(peer, per_host, sizes))
                measured = {p: {n: statistics.median(x[n] for x in rounds[p]) for n in sizes} for p in peers}
                print(f"\n{per_host}+{per_host} ranks, float32 Sum (slowest rank's median, median of "
                      f"{args.rounds} rounds)")
                others = [p for p in peers if p != "hora"] if "hora" in peers else []
                header = f"{'size':>9}" + "".join(f" {p:>10}" for p in peers)
                header += "".join(f" {p + '/hora':>12}" for p in others)
                if RATES[rate]:
                    header += f" {'link bound':>11} {'hora % of bound':>16}"
                print(header)
                for n in sizes:
                    row = f"{human(n):>9}" + "".join(f" {fmt(measured[p][n]):>10}" for p in peers)
                    row += "".join(f" {measured[p][n] / measured['hora'][n]:>11.2f}x" for p in others)
                    if RATES[rate]:
                        bound = n * 8 / RATES[rate]
                        row += f" {fmt(bound):>11}"
                        if "hora" in peers:
                            row += f" {bound / measured['hora'][n]:>15.0%}"
                    print(row, flush=True)
    finally:
        cluster("down")


if __name__ == "__main__":
    main()
