"""hora.runner.run(): runs a Python function as the ranks of a job and
returns what each rank returned, in rank order (Horovod's
``horovod.runner.run``).

The function travels pickled with cloudpickle (lambdas and closures too)
through a small store that run() serves for the job's lifetime; each rank
(``python -m hora.runner.run_task``) calls it and stores its pickled result
there. Both are signed with the job's secret (signed.py) and checked
before they are unpickled. Ranks start through horarun's launcher, or
mpirun with use_mpi.
"""

import secrets
import sys

import cloudpickle

from hora.runner import horovodrun, launch, mpi_run, signed
from hora.runner.rendezvous import RendezvousClient, RendezvousServer

# How a rank (run_task.py) finds the store, and the keys it uses there.
ADDR, PORT, SECRET = "HORA_RUN_FUNCTION_ADDR", "HORA_RUN_FUNCTION_PORT", "HORA_RUN_FUNCTION_SECRET"
FUNCTION_KEY = "function"


def result_key(rank):
    return f"result/{rank}"


def error_key(rank):
    return f"error/{rank}"


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
        output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, network_interfaces=None, executable=None, np=None, min_np=None,
        max_np=None):
    """Runs ``func(*args, **kwargs)`` on ``num_proc`` ranks (``np`` is its
    older name) and returns the list of their results, index = rank.

    Arguments mean what they mean to Horovod's run(). ``disable_cache`` has
    no effect on hora (a note says so). ``network_interfaces`` (a list, or
    ``network_interface`` as one comma-separated string) is horarun's
    --network-interfaces. The elastic arguments (``min_num_proc`` or
    ``min_np``, ``max_num_proc`` or ``max_np``, ``slots``, ``reset_limit``,
    ``cooldown_range``, ``host_discovery_script``) run horarun's elastic
    driver, which needs ``host_discovery_script``; the result is then the
    list of the last round's workers' results, in rank order. Raises
    ValueError for bad arguments and RuntimeError, naming the rank and
    carrying its traceback, when a rank fails.
    """
    if np is not None:
        num_proc = np
    min_num_proc = min_np if min_num_proc is None else min_num_proc
    max_num_proc = max_np if max_num_proc is None else max_num_proc
    interfaces = _interfaces(network_interface, network_interfaces)
    if disable_cache:
        horovodrun.note_once("disable_cache", "hora runs no cached start-up checks", prog="hora.runner.run")
    if use_gloo and use_mpi:
        raise ValueError("use_gloo and use_mpi cannot both be set")
    if mpi_args and not use_mpi:
        horovodrun.note_once("mpi_args", "it applies with use_mpi=True only", prog="hora.runner.run")
    argv = _horarun_arguments(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                              output_filename, verbose, use_mpi, mpi_args, executable)
    if np is None and min_num_proc is not None and num_proc < min_num_proc:
        argv[:2] = []   # the default num_proc: the first round waits for min_num_proc workers
    if interfaces:
        argv[:0] = ["--network-interfaces", interfaces]
    argv[:0] = _elastic_arguments(min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
                                  reset_limit=reset_limit, cooldown_range=cooldown_range,
                                  host_discovery_script=host_discovery_script)
    job_args = launch.parse_args(argv, raise_errors=True)
    kwargs = kwargs or {}
    payload = cloudpickle.dumps(lambda: func(*args, **kwargs))
    bind, address = launch.rendezvous_address(job_args)
    secret = secrets.token_hex(16)
    server = RendezvousServer(bind, 0, secret).start()
    try:
        with RendezvousClient("127.0.0.1" if bind == "0.0.0.0" else bind, server.port, secret) as store:
            store.set(FUNCTION_KEY, signed.sign(secret, FUNCTION_KEY, payload))
            environment = {ADDR: address, PORT: str(server.port), SECRET: secret}
            if job_args.elastic:
                from hora.runner import elastic

                job = elastic.ElasticJob(job_args, extra_env=environment, name="hora.runner.run")
                status = job.run()
                return _collect(store, secret, list(job.order), status, what="worker")
            if use_mpi:
                status = mpi_run.run(job_args, extra_env=environment, replace_process=False)
            else:
                status = launch.Job(job_args, extra_env=environment).run()
            return _collect(store, secret, list(range(job_args.num_proc)), status)
    finally:
        server.stop()


def _interfaces(network_interface, network_interfaces):
    """horarun's --network-interfaces value, or None."""
    if network_interface is not None and network_interfaces is not None:
        raise ValueError("give either network_interface or network_interfaces, not both")
    names = network_interface if network_interfaces is None else network_interfaces
    if names is None:
        return None
    if isinstance(names, str):
        names = names.split(",")
    names = [str(name).strip() for name in names if str(name).strip()]
    if not names:
        raise ValueError("network_interfaces names no interface")
    return ",".join(names)


def _elastic_arguments(**arguments):
    """horarun's elastic flags for run()'s elastic arguments."""
    flags = {"min_num_proc": "--min-np", "max_num_proc": "--max-np", "slots": "--slots-per-host",
             "reset_limit": "--reset-limit", "host_discovery_script": "--host-discovery-script"}
    argv = []
    for name, flag in flags.items():
        if arguments[name] is not None:
            argv += [flag, str(arguments[name])]
    if arguments["cooldown_range"] is not None:
        argv += ["--blacklist-cooldown-range", *(str(v) for v in arguments["cooldown_range"])]
    return argv


def _horarun_arguments(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                       output_filename, verbose, use_mpi, mpi_args, executable):
    argv = ["-np", str(num_proc)]
    for flag, value in (("-H", hosts), ("--hostfile", hostfile), ("--start-timeout", start_timeout),
                        ("--ssh-port", ssh_port), ("--ssh-identity-file", ssh_identity_file),
                        ("--output-filename", output_filename), ("--mpi-args", mpi_args)):
        if value is not None:
            argv += [flag, str(value)]
    if use_mpi:
        argv.append("--mpi")
    if verbose:
        argv.append("-v")
    return argv + ["--", executable or sys.executable, "-m", "hora.runner.run_task"]


def _collect(store, secret, keys, status, what="rank"):
    """The results stored under `keys` (ranks, or an elastic job's worker
    ids in rank order), in that order; RuntimeError naming the first that
    failed (with its traceback), returned nothing or whose result is not
    signed with `secret`."""
    if not keys and status != 0:
        raise RuntimeError(f"hora.runner.run: the job exited with status {status} before any {what} "
                           "finished; its output above says why")
    for key in keys:
        try:
            error = store.get(error_key(key), timeout=0)
        except TimeoutError:
            continue
        raise RuntimeError(f"{what} {key} of hora.runner.run raised:\n{error.decode(errors='replace')}")
    results = []
    for key in keys:
        try:
            results.append(cloudpickle.loads(signed.verify(secret, result_key(key),
                                                           store.get(result_key(key), timeout=0))))
        except TimeoutError:
            raise RuntimeError(f"{what} {key} of hora.runner.run returned no result (the job exited with "
                               f"status {status}; its output above says why)") from None
        except signed.UnsignedValueError as error:
            raise RuntimeError(f"{what} {key} of hora.runner.run: its result {error}") from None
    if status != 0:
        raise RuntimeError(f"hora.runner.run: the job exited with status {status} after every rank "
                           "returned its result")
    return results
