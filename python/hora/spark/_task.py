"""What runs inside each Spark task of hora.spark.run (in the PySpark
worker): the task works out its rank from the barrier stage's task list,
starts the rank as a child process (``python -m hora.spark._child``), sends
the child's output to the driver's relay and reports its exit status. A
failed rank fails the task, which fails the barrier stage: Spark then stops
the other tasks, and their children die with them (_child.py).
"""

import dataclasses
import os
import subprocess
import sys
import threading

from hora.runner import cluster, env, failures, run_function

# Lines of the child's stderr quoted in the task's error (Spark's logs).
QUOTED_LINES = 20
# How the child finds the task that started it.
PARENT_VARIABLE = "HORA_SPARK_PARENT_PID"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs from the driver (pickled into the job)."""
    num_proc: int
    rendezvous_addr: str
    rendezvous_port: int
    secret: str
    relay_port: int
    start_timeout: int
    env: tuple = ()             # (name, value) pairs the user gave
    executable: str = None


def host_of(address):
    """'host:port' (a barrier task's address) -> 'host'."""
    host, _, port = address.rpartition(":")
    return host if host and port.isdigit() else address


def barrier_partition(spec):
    """The function a barrier stage maps over its partitions: runs this
    task's rank and yields its rank."""

    def run_partition(_rows):
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        task_hosts = [host_of(info.address) for info in context.getTaskInfos()]
        placement = cluster.placements_for(task_hosts)[context.partitionId()]
        run_rank(spec, placement)
        yield placement.rank

    return run_partition


def arrow_partition(spec):
    """The same for DataFrame.mapInArrow(barrier=True) (Spark Connect):
    yields one Arrow batch with the rank."""

    def run_partition(_batches):
        import pyarrow
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        task_hosts = [host_of(info.address) for info in context.getTaskInfos()]
        placement = cluster.placements_for(task_hosts)[context.partitionId()]
        run_rank(spec, placement)
        yield pyarrow.RecordBatch.from_pydict({"rank": [placement.rank]})

    return run_partition


def rank_environment(spec, placement):
    """The child's environment: the worker's, the rank's coordinates and the
    job's rendezvous (as horarun sets them), the store of the function, and
    the user's variables last."""
    variables = env.rank_environment(
        placement, hostname=placement.host, rendezvous_addr=spec.rendezvous_addr,
        rendezvous_port=spec.rendezvous_port, secret=spec.secret, start_timeout=spec.start_timeout)
    variables.update({
        run_function.ADDR: spec.rendezvous_addr,
        run_function.PORT: str(spec.rendezvous_port),
        run_function.SECRET: spec.secret,
        PARENT_VARIABLE: str(os.getpid()),
    })
    user = dict(spec.env)
    variables.update(env.thread_default([placement], user.keys() | os.environ.keys()))
    variables.update(user)
    return env.local_environment(variables)


def run_rank(spec, placement):
    """Runs the rank's child to its end; raises RuntimeError (failing the
    task) when it fails."""
    relay = cluster.RelayClient(spec.rendezvous_addr, spec.relay_port, spec.secret, placement.rank)
    tail = failures.StderrTail()
    try:
        child = subprocess.Popen([spec.executable or sys.executable, "-m", "hora.spark._child"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=rank_environment(spec, placement))
        forwarders = [threading.Thread(target=_forward, args=(child.stdout, relay, "O", None), daemon=True),
                      threading.Thread(target=_forward, args=(child.stderr, relay, "E", tail), daemon=True)]
        for forwarder in forwarders:
            forwarder.start()
        status = child.wait()
        for forwarder in forwarders:
            forwarder.join()
        relay.send_exit(status)
    finally:
        relay.close()
    if status != 0:
        quoted = "\n".join(text for _, text in list(tail.lines)[-QUOTED_LINES:])
        raise RuntimeError(f"hora rank {placement.rank} {failures.describe_exit(status)}; the end of its "
                           f"stderr:\n{quoted}")


def _forward(source, relay, kind, tail):
    for line in iter(source.readline, b""):
        if tail is not None:
            tail.add(line, 0.0)
        relay.send_line(kind, line)
    source.close()


# --- elastic (run_elastic) ----------------------------------------------------

def offer_key(offer):
    return f"spark/offer/{offer}"


def answer_key(offer):
    return f"spark/go/{offer}"


def signal_key(number):
    return f"spark/signal/{number}"


STOP = b"stop"
SIGNAL_POLL_SECONDS = 0.5


def elastic_partition(spec):
    """The function an elastic job maps over its partitions: the task holds
    a slot for the driver. It offers itself (its host) and runs a worker
    each time the driver answers with one (worker number and environment),
    until the driver answers 'stop'. A worker that fails does not fail the
    task: the driver decides whether the slot gets another."""

    def run_partition(_rows):
        import json
        import socket

        from pyspark import TaskContext

        from hora.runner.rendezvous import RendezvousClient

        context = TaskContext.get()
        slot = f"{context.partitionId()}.{context.attemptNumber()}"
        host = socket.gethostname()
        turn = 0
        with RendezvousClient(spec.rendezvous_addr, spec.rendezvous_port, spec.secret) as store:
            while True:
                offer = f"{slot}.{turn}"
                store.set(offer_key(offer), host)
                answer = store.get(answer_key(offer))
                if answer == STOP:
                    break
                number, variables = json.loads(answer)
                run_worker(spec, number, variables)
                turn += 1
        yield context.partitionId()

    return run_partition


def run_worker(spec, number, variables):
    """Runs one elastic worker as a child; returns its exit status. The
    driver's signals for it (the store key signal_key(number)) reach the
    child."""
    from hora.runner.rendezvous import RendezvousClient, RendezvousError

    relay = cluster.RelayClient(spec.rendezvous_addr, spec.relay_port, spec.secret, number)
    environment = dict(variables)
    environment.update({
        run_function.ADDR: spec.rendezvous_addr,
        run_function.PORT: str(spec.rendezvous_port),
        run_function.SECRET: spec.secret,
        PARENT_VARIABLE: str(os.getpid()),
    })
    environment.update(dict(spec.env))
    signals = RendezvousClient(spec.rendezvous_addr, spec.rendezvous_port, spec.secret)
    try:
        child = subprocess.Popen([spec.executable or sys.executable, "-m", "hora.spark._child"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env.local_environment(environment))

        def relay_signals():
            while child.poll() is None:
                try:
                    value = signals.get(signal_key(number), timeout=SIGNAL_POLL_SECONDS)
                except TimeoutError:
                    continue
                except (RendezvousError, OSError):
                    return
                child.send_signal(int(value))
                return

        watcher = threading.Thread(target=relay_signals, daemon=True)
        watcher.start()
        forwarders = [threading.Thread(target=_forward, args=(child.stdout, relay, "O", None), daemon=True),
                      threading.Thread(target=_forward, args=(child.stderr, relay, "E", None), daemon=True)]
        for forwarder in forwarders:
            forwarder.start()
        status = child.wait()
        for thread in forwarders + [watcher]:
            thread.join()
        relay.send_exit(status)
        return status
    finally:
        signals.close()
        relay.close()
