"""Jobs started by launchers other than horarun: torchrun (and torchelastic),
and Slurm's srun with the MASTER_ADDR / MASTER_PORT that torch users export.

horarun, ``horarun --mpi``, mpirun and srun with MPI set the variables hora's
core reads themselves (HORA_* or the MPI launcher's). torchrun sets torch's:
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. For such a job, ``adopt()`` forms one hora job
of WORLD_SIZE ranks: rank 0 serves hora's rendezvous (its own server, on a
port the kernel picks) with a fresh secret, and publishes where it is and the
secret in torch's store at MASTER_ADDR:MASTER_PORT (the torchrun agent's, or
one rank 0 serves, as torch's own ``env://`` does); every rank reads them
there. That store is torch's: it has no authentication, so under torchrun a
job's secret is as safe as torch's store is (docs/security.md).

Variables that are present but inconsistent raise ``ValueError`` naming them:
a job never silently falls apart into jobs of size 1.
"""

import dataclasses
import secrets
import socket

from hora.common.session import session
from hora.runner.rendezvous import RendezvousServer

# What horarun (or a parent hora job's elastic driver) sets: when present,
# hora's own variables rule.
HORA_VARIABLES = ("HORA_RANK", "HOROVOD_RANK", "HORA_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR")
# An MPI launcher started the process: the core bootstraps through MPI.
MPI_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")
TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

def _integer(environ, name, default=None):
    value = environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _slurm_step(environ):
    return "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ


def coordinates(environ):
    """(launcher, rank, size, local_rank, local_size, cross_rank, cross_size,
    master_addr, master_port) of a torchrun job, or of a Slurm step that
    names a MASTER_ADDR and MASTER_PORT; None when neither started this
    process (or horarun or an MPI launcher did). Raises ValueError when the
    variables are inconsistent."""
    if any(name in environ for name in HORA_VARIABLES + MPI_VARIABLES):
        return None   # horarun's job, or an MPI launcher's (scripts may export RANK too)
    if "TORCHELASTIC_RUN_ID" in environ or ("RANK" in environ and "WORLD_SIZE" in environ):
        launcher = "torchrun"
        rank, size = _integer(environ, "RANK"), _integer(environ, "WORLD_SIZE")
        if "LOCAL_WORLD_SIZE" in environ:
            local_rank = _integer(environ, "LOCAL_RANK", rank)
            local_size = _integer(environ, "LOCAL_WORLD_SIZE")
            cross_rank = _integer(environ, "GROUP_RANK", 0)
            cross_size = _integer(environ, "GROUP_WORLD_SIZE", max(1, size // local_size) if local_size else 1)
        else:
            # One process per host (a PyTorchJob's pods, say).
            local_rank, local_size = _integer(environ, "LOCAL_RANK", 0), 1
            cross_rank, cross_size = rank, size
    elif _slurm_step(environ) and ("MASTER_ADDR" in environ or "MASTER_PORT" in environ):
        launcher = "srun"
        rank = _integer(environ, "SLURM_PROCID")
        size = _integer(environ, "SLURM_STEP_NUM_TASKS", _integer(environ, "SLURM_NTASKS", 1))
        local_rank = _integer(environ, "SLURM_LOCALID", rank)
        local_size = _tasks_on_this_node(environ, size)
        cross_rank = _integer(environ, "SLURM_NODEID", 0)
        cross_size = _integer(environ, "SLURM_STEP_NUM_NODES", _integer(environ, "SLURM_NNODES", 1))
    else:
        return None
    where = "torchrun's" if launcher == "torchrun" else "Slurm's"
    if size < 1:
        raise ValueError(f"{where} world size {size} is not positive")
    if not 0 <= rank < size:
        raise ValueError(f"{where} rank {rank} is outside 0..{size - 1}")
    if not 1 <= local_size <= size or not 0 <= local_rank < local_size:
        raise ValueError(f"{where} local rank {local_rank} does not fit a host of {local_size} of the "
                         f"job's {size} ranks")
    if not 1 <= cross_size <= size or not 0 <= cross_rank < cross_size:
        raise ValueError(f"{where} node rank {cross_rank} is outside 0..{cross_size - 1}")
    master_addr = environ.get("MASTER_ADDR", "")
    master_port = environ.get("MASTER_PORT", "")
    if size > 1 and not (master_addr and master_port):
        missing = " and ".join(n for n in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(n))
        raise ValueError(f"{where} variables give a job of {size} ranks but {missing} is not set: the ranks "
                         "cannot find each other (start the job with torchrun, or export both)")
    port = _integer(environ, "MASTER_PORT", 0)
    if size > 1 and not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT={port} is not a TCP port")
    return launcher, rank, size, local_rank, local_size, cross_rank, cross_size, master_addr, port


def _tasks_on_this_node(environ, size):
    """The step's tasks on this node, from its tasks-per-node list ("2(x3),1"):
    SLURM_STEP_TASKS_PER_NODE (the step's own), else the allocation's."""
    name = next((n for n in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if environ.get(n)), None)
    if name is None:
        return _integer(environ, "SLURM_NTASKS_PER_NODE", size)
    text = environ[name]
    node = _integer(environ, "SLURM_NODEID", 0)
    for part in text.split(","):
        count, _, repeat = part.partition("(x")
        try:
            count, repeat = int(count), int(repeat.rstrip(")") or 1)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not Slurm's tasks-per-node list") from None
        if node < repeat:
            return count
        node -= repeat
    raise ValueError(f"{name}={text!r} names fewer nodes than SLURM_NODEID")


def _torch_store(environ, rank, master_addr, master_port, timeout):
    try:
        from datetime import timedelta

        from torch.distributed import TCPStore
    except ImportError:
        raise ValueError("a job started by torchrun (or with MASTER_ADDR and MASTER_PORT) finds its ranks "
                         "through torch's store, which needs torch in this Python") from None
    agent = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # As torch's own env:// does: the agent's store, or one that rank 0 serves.
    return TCPStore(master_addr, master_port, None, not agent and rank == 0, timedelta(seconds=timeout),
                    multi_tenant=True)


def adopt(config):
    """``config`` (a hora.common.config.Config) with the coordinates, the
    rendezvous server and the secret of a job of torchrun or of srun with
    MASTER_ADDR and MASTER_PORT, after rank 0 has started the job's
    rendezvous server and published it; ``config`` itself for any other job.
    Raises ValueError for inconsistent variables. A later init of the same
    process joins the same job again (its server and secret are kept)."""
    if session.launcher_settings is not None:
        return dataclasses.replace(config, **session.launcher_settings)
    environ = config.launcher_environment
    found = coordinates(environ)
    if found is None:
        return config
    launcher, rank, size, local_rank, local_size, cross_rank, cross_size, master_addr, master_port = found
    settings = {"rank": rank, "size": size, "local_rank": local_rank, "local_size": local_size,
                "cross_rank": cross_rank, "cross_size": cross_size}
    if size > 1:
        timeout = config.start_timeout
        store = session.torch_store = _torch_store(environ, rank, master_addr, master_port, timeout)
        # torchrun makes a new store for each restart of the workers, so the
        # run (or Slurm step) names the key.
        key = (f"hora/{environ.get('TORCHELASTIC_RUN_ID', environ.get('SLURM_JOB_ID', 'job'))}/"
               f"{environ.get('SLURM_STEP_ID', '0')}/rendezvous")
        one_host = cross_size == 1
        if rank == 0:
            secret = secrets.token_hex(16)
            served = session.launcher_server = RendezvousServer("127.0.0.1" if one_host else "0.0.0.0", 0,
                                                                secret).start()
            address = "127.0.0.1" if one_host else master_addr
            store.set(key, f"{address}\n{served.port}\n{secret}")
        try:
            address, port, secret = store.get(key).decode().split("\n")
        except Exception as error:
            raise ValueError(f"{launcher}: rank 0 did not publish hora's rendezvous in torch's store at "
                             f"{master_addr}:{master_port} within {timeout} s: {error}") from None
        settings.update({"rendezvous_addr": address, "rendezvous_port": int(port), "secret": secret})
        if not one_host and "HORA_HOSTNAME" not in environ:
            # Where this rank's transports listen: an address the other
            # hosts reach.
            settings["hostname"] = socket.gethostname()
    session.launcher_settings = settings
    return dataclasses.replace(config, **settings)
