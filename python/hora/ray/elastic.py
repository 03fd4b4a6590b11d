"""Elastic training on Ray: ``ElasticRayExecutor`` (Horovod's name and
arguments) runs horarun's elastic driver (hora.runner.elastic) with Ray's
nodes as the hosts and actors as the workers.

    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=4)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    results = executor.run(train)      # train() calls hvd.init() and hvd.elastic.run

Each alive node offers as many slots as it has CPUs (and GPUs, with
use_gpu) for cpus_per_slot (gpus_per_slot); a worker is an actor pinned to
its node, named ``<node>:<slot>`` (the node: the first 12 digits of its
Ray node id). An actor that dies or whose function
raises is a failed worker: its node is blacklisted (for a random time in
settings.cooldown_range, else for good), and the survivors go on in a new
round from their last commit; nodes that join the cluster get workers up to
max_num_proc. The first worker whose function returns ends the rounds; run()
returns the results of that round's workers in rank order.
"""

import dataclasses
import math
import os
import threading
import types

from hora.ray.worker import Worker
from hora.runner import elastic as driver

_KILLED = -9   # the exit status a dead actor counts as (SIGKILL)
_NODE_DIGITS = 12


@dataclasses.dataclass
class ElasticSettings:
    """What ElasticRayExecutor.create_settings() makes."""
    min_num_proc: int = 1
    max_num_proc: int = None
    reset_limit: int = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    cooldown_range: tuple = None
    nics: tuple = None
    verbose: int = 0
    discovery: object = None        # an object with find_available_hosts_and_slots()


class ElasticRayExecutor:
    """Elastic training on Ray actors (see the module's docstring)."""

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, min_np=None, max_np=None, cooldown_range=None,
                        verbose=0, **kwargs):
        """Horovod's arguments; ssh_identity_file has no use on Ray."""
        if kwargs:
            raise TypeError(f"ElasticRayExecutor.create_settings: unknown arguments {sorted(kwargs)}")
        min_num_proc = min_np if min_np is not None else min_num_proc
        max_num_proc = max_np if max_np is not None else max_num_proc
        if min_num_proc is None:
            raise ValueError("ElasticRayExecutor: min_num_proc must be a positive integer, got None")
        cooldown_range = driver.checked_api_arguments("ElasticRayExecutor", min_num_proc, max_num_proc,
                                                      elastic_timeout, reset_limit, cooldown_range)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"ElasticRayExecutor: timeout_s must be a positive number of seconds, got {timeout_s!r}")
        return ElasticSettings(min_num_proc=min_num_proc, max_num_proc=max_num_proc, reset_limit=reset_limit,
                               elastic_timeout=elastic_timeout, timeout_s=timeout_s, cooldown_range=cooldown_range,
                               nics=tuple(nics) if nics else None, verbose=verbose)

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        if gpus_per_slot and not use_gpu:
            raise ValueError("ElasticRayExecutor: gpus_per_slot is set but use_gpu is False")
        if isinstance(cpus_per_slot, bool) or not isinstance(cpus_per_slot, (int, float)) or cpus_per_slot <= 0:
            raise ValueError(f"ElasticRayExecutor: cpus_per_slot must be a positive number, got {cpus_per_slot!r}")
        self.settings = settings
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        if not override_discovery and settings.discovery is None:
            raise ValueError("ElasticRayExecutor: override_discovery=False needs settings.discovery (an object "
                             "with find_available_hosts_and_slots())")
        self.discovery = settings.discovery if not override_discovery else None
        self._started = False

    def start(self):
        """Connects to Ray (ray.init() if it is not yet); the workers start
        in run()."""
        import ray

        if not ray.is_initialized():
            ray.init()
        self._started = True

    def run(self, worker_fn, callbacks=None):
        """Runs ``worker_fn()`` on the workers of every round until the
        first returns; returns the results of its round in rank order.
        RuntimeError says why when the job stops."""
        if callbacks:
            raise NotImplementedError("ElasticRayExecutor: callbacks are not supported; return values from "
                                      "the function instead")
        if not self._started:
            raise RuntimeError("ElasticRayExecutor: call start() first")
        settings = self.settings
        args = types.SimpleNamespace(
            min_np=settings.min_num_proc, max_np=settings.max_num_proc or math.inf,
            elastic_timeout=settings.elastic_timeout, reset_limit=settings.reset_limit,
            blacklist_cooldown_range=settings.cooldown_range, start_timeout=settings.timeout_s,
            verbose=settings.verbose, timeline_filename=None, timeline_mark_cycles=False, monitor=None,
            network_interfaces=",".join(settings.nics) if settings.nics else None)
        pools = []

        def make_pool(job):
            pools.append(_ActorPool(job, self, worker_fn))
            return pools[0]

        job = driver.ElasticJob(args, extra_env=self.env_vars, pool=make_pool, name="hora.ray")
        status = job.run()
        pool = pools[0]
        if status != 0:
            raise RuntimeError(f"ElasticRayExecutor: the elastic job stopped: {job.stop_reason(status)}")
        return [pool.results[worker] for worker in job.order if worker in pool.results]


class _ActorPool:
    """Ray's nodes as the elastic driver's hosts, actors as its workers."""

    def __init__(self, job, executor, worker_fn):
        import ray

        self.job = job
        self.executor = executor
        self.worker_fn = worker_fn
        self.results = {}
        self._driver_address = ray.util.get_node_ip_address()
        self._lock = threading.Lock()
        self._actors = []

    def _nodes(self):
        """{short node id: node} of the alive nodes."""
        import ray

        return {node["NodeID"][:_NODE_DIGITS]: node for node in ray.nodes() if node.get("Alive")}

    def discover(self):
        if self.executor.discovery is not None:
            return dict(self.executor.discovery.find_available_hosts_and_slots())
        found = {}
        for node_id, node in self._nodes().items():
            resources = node.get("Resources", {})
            slots = resources.get("CPU", 0) // self.executor.cpus_per_slot
            if self.executor.use_gpu:
                slots = min(slots, resources.get("GPU", 0) // self.executor.gpus_per_slot)
            if slots >= 1:
                found[node_id] = int(slots)
        return found

    def rendezvous_address(self, host):
        return self._driver_address

    def starting(self):
        return False

    def hostname(self, host):
        node = self._nodes().get(host)
        return node["NodeManagerAddress"] if node else host

    def start(self, worker_id, host, number, variables):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options = {"num_cpus": self.executor.cpus_per_slot, "num_gpus": self.executor.gpus_per_slot}
        node = self._nodes().get(host)
        if node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        else:   # a host a custom discovery named by address
            options["resources"] = {f"node:{host}": 0.001}
        actor = ray.remote(Worker).options(**options).remote()
        with self._lock:
            self._actors.append(actor)
        # Ranks share memory only with ranks of their own node.
        actor.update_env_vars.remote({**variables, "HORA_HOST_IDENTITY": host})
        worker_fn = self.worker_fn
        handle = _ActorHandle(actor, worker_id)
        reference = actor.execute.remote(lambda _executable: worker_fn())
        threading.Thread(target=self._watch, args=(handle, reference), daemon=True,
                         name=f"hora-ray-{worker_id}").start()
        return handle

    def _watch(self, handle, reference):
        import ray

        try:
            result = ray.get(reference)
        except ray.exceptions.RayActorError:
            handle.failure = "lost its actor (the process was killed or its node left)"
            code = _KILLED
        except ray.exceptions.RayTaskError as error:
            cause = error.cause if getattr(error, "cause", None) is not None else error
            handle.failure = f"raised {type(cause).__name__}: {cause}"
            code = 1
        else:
            with self._lock:
                self.results[handle.worker_id] = result
            code = 0
        handle.done.set()
        self.job.exits.put((handle, code))

    def close(self):
        import ray

        with self._lock:
            actors, self._actors = self._actors, []
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:   # noqa: BLE001 - already dead
                pass


class _ActorHandle:
    def __init__(self, actor, worker_id):
        self.actor = actor
        self.worker_id = worker_id
        self.failure = None
        self.done = threading.Event()

    def signal(self, signum):
        """Any signal ends the actor (Ray has no softer stop for a running call)."""
        import ray

        if not self.done.is_set():
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:   # noqa: BLE001 - already dead
                pass

    def finish(self, timeout):
        self.signal(None)
        self.done.wait(timeout)
