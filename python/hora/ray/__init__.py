"""hora on Ray: ``RayExecutor`` starts one actor per rank in one placement
group and runs functions on all of them (Horovod's
``horovod.ray.RayExecutor``).

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    results = executor.run(train, args=(config,))   # train() calls hvd.init()
    executor.shutdown()

Ranks on one node are contiguous (nodes in the order of their first
actor), with local and cross ranks set; the driver serves the job's
rendezvous with a secret made for this executor. The first failure of any
actor (its function raised, or its process died) ends the call at once:
every actor and the placement group are released and the error names the
rank. See docs/ray.md.
"""

import dataclasses
import secrets

from hora.runner import cluster, env
from hora.ray.worker import Worker

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclasses.dataclass
class Settings:
    """What RayExecutor.create_settings() makes (Horovod's MiniSettings):
    timeout_s bounds the ranks' rendezvous in hvd.init(),
    placement_group_timeout_s the wait for the placement group."""
    timeout_s: int = 30
    placement_group_timeout_s: int = 100
    nics: tuple = None
    ssh_identity_file: str = None
    elastic: bool = False


class RayExecutor:
    """A hora job on Ray actors, one per rank.

    num_workers: the number of ranks; or num_hosts with
        num_workers_per_host (one bundle per host, STRICT_SPREAD).
    cpus_per_worker, use_gpu, gpus_per_worker: each actor's resources.
    placement_strategy: the placement group's strategy (PACK by default;
        SPREAD, STRICT_PACK, STRICT_SPREAD).
    start_timeout: seconds to wait for the placement group (default:
        settings.placement_group_timeout_s, else 100).
    env: variables set in every actor before a function runs.

    min_workers/max_workers (with reset_limit, cooldown_range,
    elastic_timeout) make an elastic executor instead: run() then runs the
    function as ElasticRayExecutor does (hora.ray.elastic).
    """

    @classmethod
    def create_settings(cls, timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None):
        """Settings for RayExecutor(settings, ...). ssh options have no
        use on Ray (actors need no ssh) and are kept for compatibility."""
        _positive("timeout_s", timeout_s)
        _positive("placement_group_timeout_s", placement_group_timeout_s)
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                        nics=tuple(nics) if nics else None, ssh_identity_file=ssh_identity_file)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True, placement_strategy="PACK", start_timeout=None, env=None):
        self.settings = settings if settings is not None else Settings()
        self._elastic = None
        if min_workers is not None or max_workers is not None:
            if num_workers is not None or num_hosts is not None:
                raise ValueError("hora.ray.RayExecutor: give num_workers (a fixed job) or min_workers/max_workers "
                                 "(an elastic one), not both")
            from hora.ray.elastic import ElasticRayExecutor

            self._elastic = ElasticRayExecutor(
                ElasticRayExecutor.create_settings(
                    min_num_proc=min_workers if min_workers is not None else 1, max_num_proc=max_workers,
                    reset_limit=reset_limit, elastic_timeout=elastic_timeout, timeout_s=self.settings.timeout_s,
                    nics=self.settings.nics, cooldown_range=cooldown_range),
                use_gpu=use_gpu, cpus_per_slot=cpus_per_worker, gpus_per_slot=gpus_per_worker, env_vars=env)
            return
        if num_workers is not None and num_hosts is not None:
            raise ValueError("hora.ray.RayExecutor: give num_workers or num_hosts (with num_workers_per_host), "
                             "not both")
        if num_workers is None and num_hosts is None:
            raise ValueError("hora.ray.RayExecutor: give num_workers (or num_hosts and num_workers_per_host)")
        if num_hosts is not None:
            _positive("num_hosts", num_hosts)
            _positive("num_workers_per_host", num_workers_per_host)
            placement_strategy = "STRICT_SPREAD"
        else:
            _positive("num_workers", num_workers)
        _positive("cpus_per_worker", cpus_per_worker, allow_zero=True)
        if placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(f"hora.ray.RayExecutor: placement_strategy must be one of "
                             f"{', '.join(PLACEMENT_STRATEGIES)}, got {placement_strategy!r}")
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = num_workers if num_hosts is None else num_hosts * num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.placement_strategy = placement_strategy
        self.start_timeout = start_timeout if start_timeout is not None else \
            self.settings.placement_group_timeout_s
        _positive("start_timeout", self.start_timeout)
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.workers = []          # actors in rank order
        self.placements = []       # their RankPlacement, in rank order
        self._placement_group = None
        self._server = None
        self._failed = None

    # --- Horovod's API -----------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Reserves the placement group, starts the actors, numbers them and
        gives each its rank's environment; then makes
        ``executable_cls(*executable_args, **executable_kwargs)`` in each."""
        import ray

        if self._elastic is not None:
            if executable_cls is not None:
                raise NotImplementedError("hora.ray.RayExecutor: an elastic executor runs functions only "
                                          "(no executable_cls)")
            self._elastic.env_vars.update({str(k): str(v) for k, v in (extra_env_vars or {}).items()})
            return self._elastic.start()
        if self.workers:
            raise RuntimeError("hora.ray.RayExecutor: start() was called already; call shutdown() first")
        if not ray.is_initialized():
            ray.init()
        self._failed = None
        try:
            self._placement_group = self._reserve()
            actors = self._start_actors()
            self._number(actors, dict(extra_env_vars or {}))
            self._gather([w.start_executable.remote(executable_cls, list(executable_args or ()),
                                                    dict(executable_kwargs or {})) for w in self.workers],
                         "starting the executable")
        except BaseException:
            self._release()
            raise

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs ``fn(*args, **kwargs)`` on every rank; returns the results
        in rank order."""
        _no_callbacks(callbacks)
        args, kwargs = list(args or ()), dict(kwargs or {})
        if self._elastic is not None:
            return self._elastic.run(lambda: fn(*args, **kwargs))
        return self._gather(self._submit(lambda _executable: fn(*args, **kwargs)), "running the function")

    def execute(self, fn, callbacks=None):
        """Runs ``fn(executable)`` on every rank (the executable_cls
        instance start() made, or None); results in rank order."""
        _no_callbacks(callbacks)
        return self._gather(self._submit(fn), "executing the function")

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts ``fn(*args, **kwargs)`` on every rank and returns the
        ObjectRefs, in rank order, without waiting."""
        args, kwargs = list(args or ()), dict(kwargs or {})
        return self._submit(lambda _executable: fn(*args, **kwargs))

    def execute_single(self, fn):
        """Runs ``fn(executable)`` on rank 0 only and returns its result."""
        self._check_started()
        return self._gather([self.workers[0].execute.remote(fn)], "executing the function on rank 0")[0]

    def shutdown(self):
        """Kills every actor and removes the placement group."""
        if self._elastic is None:
            self._release()

    # --- start-up ------------------------------------------------------------

    def _bundles(self):
        gpu = {"GPU": self.gpus_per_worker} if self.gpus_per_worker else {}
        if self.num_hosts is not None:
            per_host = self.num_workers_per_host
            return [{"CPU": self.cpus_per_worker * per_host, **{k: v * per_host for k, v in gpu.items()}}
                    for _ in range(self.num_hosts)]
        return [{"CPU": self.cpus_per_worker, **gpu} for _ in range(self.num_workers)]

    def _reserve(self):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        bundles = self._bundles()
        group = placement_group(bundles, strategy=self.placement_strategy)
        try:
            ray.get(group.ready(), timeout=self.start_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            available = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            total = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
            raise TimeoutError(
                f"hora.ray.RayExecutor: could not place {self.num_workers} workers within "
                f"{self.start_timeout:g} s: the placement group needs {len(bundles)} bundles of {bundles[0]} "
                f"({self.placement_strategy}); the cluster has {_resources(available)} free of "
                f"{_resources(total)}") from None
        return group

    def _start_actors(self):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        worker_class = ray.remote(Worker)
        per_bundle = self.num_workers_per_host if self.num_hosts is not None else 1
        return [worker_class.options(
                    num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self._placement_group, placement_group_bundle_index=i // per_bundle)).remote()
                for i in range(self.num_workers)]

    def _number(self, actors, extra_env):
        import ray

        self.workers = actors   # so that a failure below releases them
        locations = self._gather([a.location.remote() for a in actors], "starting the actors")
        placements = cluster.placements_for([node for node, _ in locations])
        self.workers = [None] * len(actors)
        self.placements = [None] * len(actors)
        for actor, placement in zip(actors, placements):
            self.workers[placement.rank] = actor
            self.placements[placement.rank] = placement
        secret = secrets.token_hex(16)
        from hora.runner.rendezvous import RendezvousServer

        self._server = RendezvousServer("0.0.0.0", 0, secret).start()
        address = ray.util.get_node_ip_address()
        ip_of_node = dict(locations)
        variables = []
        for placement in self.placements:
            rank_env = env.rank_environment(
                placement, hostname=ip_of_node[placement.host], rendezvous_addr=address,
                rendezvous_port=self._server.port, secret=secret, start_timeout=self.settings.timeout_s)
            # Ranks share memory only with ranks of their own node.
            rank_env["HORA_HOST_IDENTITY"] = placement.host
            if self.settings.nics:
                rank_env["HORA_NETWORK_INTERFACES"] = ",".join(self.settings.nics)
            rank_env.update(self.env)
            rank_env.update({str(k): str(v) for k, v in extra_env.items()})
            variables.append(rank_env)
        self._gather([w.update_env_vars.remote(v) for w, v in zip(self.workers, variables)],
                     "setting the ranks' environment")

    # --- calls ---------------------------------------------------------------

    def _check_started(self):
        if self._elastic is not None:
            raise NotImplementedError("hora.ray.RayExecutor: an elastic executor (min_workers) supports run() only")
        if self._failed is not None:
            raise RuntimeError(f"hora.ray.RayExecutor was shut down after a failure ({self._failed}); "
                               "call start() again")
        if not self.workers:
            raise RuntimeError("hora.ray.RayExecutor: call start() first")

    def _submit(self, fn):
        self._check_started()
        return [worker.execute.remote(fn) for worker in self.workers]

    def _gather(self, refs, doing):
        """ray.get(refs), but the first failure of any rank ends the wait:
        every actor is released and a RuntimeError names the rank."""
        import ray

        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    self._fail(rank_of[ref], doing, "its actor died (the process was killed or crashed)", error)
                except ray.exceptions.RayTaskError as error:
                    cause = error.cause if getattr(error, "cause", None) is not None else error
                    self._fail(rank_of[ref], doing, f"{type(cause).__name__}: {cause}", error)
        return ray.get(list(refs))

    def _fail(self, rank, doing, what, error):
        message = f"rank {rank} failed while {doing}: {what}"
        self._release()
        self._failed = message
        raise RuntimeError(f"hora.ray.RayExecutor: {message}; every actor and the placement group were "
                           "released") from error

    def _release(self):
        import ray
        from ray.util.placement_group import remove_placement_group

        for worker in self.workers:
            if worker is not None:
                try:
                    ray.kill(worker, no_restart=True)
                except Exception:   # noqa: BLE001 - already dead
                    pass
        self.workers = []
        self.placements = []
        if self._placement_group is not None:
            try:
                remove_placement_group(self._placement_group)
            except Exception:   # noqa: BLE001 - already removed
                pass
            self._placement_group = None
        if self._server is not None:
            self._server.stop()
            self._server = None


def _positive(name, value, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"hora.ray.RayExecutor: {name} must be a positive number, got {value!r}")


def _no_callbacks(callbacks):
    if callbacks:
        raise NotImplementedError("hora.ray.RayExecutor: callbacks (values logged by rank 0 through Horovod's "
                                  "Ray logger) are not supported; return values from the function instead")


def _resources(resources):
    return ", ".join(f"{v:g} {k}" for k, v in sorted(resources.items())) or "none"


def __getattr__(name):
    # hora.ray.ElasticRayExecutor, loaded on first use.
    if name == "ElasticRayExecutor":
        from hora.ray.elastic import ElasticRayExecutor

        return ElasticRayExecutor
    raise AttributeError(f"module 'hora.ray' has no attribute {name!r}")
