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

_ELASTIC = "elastic training"
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
    no effect on hora (a note says so); the elastic arguments and network
    interfaces are not supported yet (NotImplementedError). Raises
    ValueError for bad arguments and RuntimeError, naming the rank and
    carrying its traceback, when a rank fails.
    """
    if np is not None:
        num_proc = np
    _refuse_unsupported(min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
                        reset_limit=reset_limit, cooldown_range=cooldown_range,
                        host_discovery_script=host_discovery_script, min_np=min_np, max_np=max_np,
                        network_interface=network_interface, network_interfaces=network_interfaces)
    if disable_cache:
        horovodrun.note_once("disable_cache", "hora runs no cached start-up checks", prog="hora.runner.run")
    if use_gloo and use_mpi:
        raise ValueError("use_gloo and use_mpi cannot both be set")
    if mpi_args and not use_mpi:
        horovodrun.note_once("mpi_args", "it applies with use_mpi=True only", prog="hora.runner.run")
    argv = _horarun_arguments(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                              output_filename, verbose, use_mpi, mpi_args, executable)
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
            if use_mpi:
                status = mpi_run.run(job_args, extra_env=environment, replace_process=False)
            else:
                status = launch.Job(job_args, extra_env=environment).run()
            return _collect(store, secret, job_args.num_proc, status)
    finally:
        server.stop()


def _refuse_unsupported(**arguments):
    for name, value in arguments.items():
        if value is not None:
            what = "choosing network interfaces" if name.startswith("network") else _ELASTIC
            raise NotImplementedError(f"{name} is not supported by hora yet ({what})")


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


def _collect(store, secret, size, status):
    """The ranks' results in rank order; RuntimeError naming the first rank
    that failed (with its traceback), returned nothing or whose result is
    not signed with `secret`."""
    for rank in range(size):
        try:
            error = store.get(error_key(rank), timeout=0)
        except TimeoutError:
            continue
        raise RuntimeError(f"rank {rank} of hora.runner.run raised:\n{error.decode(errors='replace')}")
    results = []
    for rank in range(size):
        try:
            results.append(cloudpickle.loads(signed.verify(secret, result_key(rank),
                                                           store.get(result_key(rank), timeout=0))))
        except TimeoutError:
            raise RuntimeError(f"rank {rank} of hora.runner.run returned no result (the job exited with "
                               f"status {status}; its output above says why)") from None
        except signed.UnsignedValueError as error:
            raise RuntimeError(f"rank {rank} of hora.runner.run: its result {error}") from None
    if status != 0:
        raise RuntimeError(f"hora.runner.run: the job exited with status {status} after every rank "
                           "returned its result")
    return results
