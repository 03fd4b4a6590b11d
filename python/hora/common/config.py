"""What ``hvd.init()`` is configured with: ``Config``, read from the
environment once.

The launchers (horarun, ``horarun --mpi``, mpirun, srun, torchrun) speak to
a rank through environment variables; ``Config.from_environment()`` is the
one place the Python side reads them. ``init(config=...)`` takes a Config,
and what Python learns after the process started (an elastic worker's rank
in its newest round, a torchrun job's rendezvous) travels as a new Config
(``dataclasses.replace``) to the core, never as a write to ``os.environ``.

The core reads the rest of its settings (fusion threshold, cache capacity,
timeouts, the backend, ...) itself, from the same environment
(src/util/env.cc); the fields below marked *to the core* override what it
would read there.
"""

import dataclasses
import os
from typing import Mapping, Optional

from hora.runner.monitor import INTERVAL_VARIABLE as MONITOR_INTERVAL_VARIABLE
from hora.runner.rounds import ENVIRONMENT_FLAG as ELASTIC_VARIABLE
from hora.runner.rounds import TIMEOUT_VARIABLE as ELASTIC_TIMEOUT_VARIABLE
from hora.runner.rounds import WORKER_VARIABLE

# Where the core finds the job's size before init (src/util/env.cc), in its
# order; Slurm's only inside a step.
SIZE_VARIABLES = ("HORA_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
SLURM_SIZE_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")

TIMELINE_VARIABLES = ("HORA_TIMELINE", "HOROVOD_TIMELINE")
METRICS_PORT_VARIABLE = "HORA_METRICS_PORT"
METRICS_ADDRESS_VARIABLE = "HORA_METRICS_ADDR"
START_TIMEOUT_VARIABLES = ("HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT")
RENDEZVOUS_ADDR_VARIABLES = ("HORA_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR")
RENDEZVOUS_PORT_VARIABLES = ("HORA_RENDEZVOUS_PORT", "HOROVOD_GLOO_RENDEZVOUS_PORT")
SECRET_VARIABLE = "HORA_SECRET"

DEFAULT_METRICS_ADDRESS = "127.0.0.1"
LAST_PORT = 65535

# The fields the core takes from a Config instead of the environment.
CORE_FIELDS = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "hostname",
               "rendezvous_addr", "rendezvous_port", "secret", "elastic_round")


def _first(environ, names, default=""):
    """The first non-empty value of ``names`` (stripped), else ``default``."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return default


def _metrics_port(environ):
    text = environ.get(METRICS_PORT_VARIABLE, "").strip()
    if not text:
        return None
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= LAST_PORT:
        raise ValueError(f"{METRICS_PORT_VARIABLE} must be a port number from 1 to {LAST_PORT} "
                         f"(each rank serves on it plus its local rank), got {text!r}")
    return port


def _size_from(environ):
    """The job's size as the core will find it, or None where it is not
    known before init (malformed: None, the core names the variable)."""
    names = SIZE_VARIABLES
    if "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ:
        names += SLURM_SIZE_VARIABLES
    for name in names:
        value = environ.get(name, "")
        if value:
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def _port(environ, names):
    text = _first(environ, names)
    try:
        return int(text) if text else None
    except ValueError:
        raise ValueError(f"{names[0]}={text!r} is not a port number") from None


@dataclasses.dataclass(frozen=True)
class Config:
    """How this process joins its job. Immutable: change it with
    ``dataclasses.replace``. ``None`` means "as the core finds it"."""

    # This rank's coordinates (to the core). None: the core reads the
    # launcher's variables (horarun's HORA_RANK ..., Open MPI's, PMI's, Slurm's).
    rank: Optional[int] = None
    size: Optional[int] = None
    local_rank: Optional[int] = None
    local_size: Optional[int] = None
    cross_rank: Optional[int] = None
    cross_size: Optional[int] = None
    # The address this rank's transports listen on (to the core).
    hostname: Optional[str] = None
    # The job's rendezvous server and its secret (to the core; the monitor
    # and the elastic worker use them too). HORA_RENDEZVOUS_ADDR/_PORT,
    # HORA_SECRET (Horovod's HOROVOD_GLOO_RENDEZVOUS_* also work).
    rendezvous_addr: Optional[str] = None
    rendezvous_port: Optional[int] = None
    secret: Optional[str] = None
    # The job's size as the launcher's variables give it before init (None:
    # unknown until init); init(process_sets=...) is checked against it.
    launcher_size: Optional[int] = None
    # Seconds the ranks may take to reach each other (HORA_START_TIMEOUT).
    start_timeout: float = 120.0
    # An elastic job's worker (HORA_ELASTIC=1): its id (HORA_WORKER_ID), how
    # long it waits for a round that includes it (HORA_ELASTIC_TIMEOUT), and
    # the round it joined (to the core; -1: none, or not elastic).
    elastic: bool = False
    worker_id: str = ""
    elastic_timeout: float = 600.0
    elastic_round: int = -1
    # HORA_TIMELINE (HOROVOD_TIMELINE): (variable, path), checked at init;
    # the core writes the file.
    timeline: Optional[tuple] = None
    # HORA_METRICS_PORT / HORA_METRICS_ADDR: the base port of each rank's
    # /metrics endpoint (None: none) and the address it listens on.
    metrics_port: Optional[int] = None
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    # HORA_MONITOR_INTERVAL as given ("" without horarun --monitor).
    monitor_interval: str = ""
    # The variables a launcher other than horarun (torchrun, srun) set, for
    # hora.common.launchers; empty under horarun.
    launcher_environment: Mapping = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_environment(cls, environ=None):
        """The Config the launcher's variables give (``os.environ`` by
        default); ValueError naming a malformed variable."""
        environ = os.environ if environ is None else environ
        timeline = next(((n, environ[n]) for n in TIMELINE_VARIABLES if environ.get(n)), None)
        start_timeout = _first(environ, START_TIMEOUT_VARIABLES, "120")
        try:
            start_timeout = float(start_timeout)
        except ValueError:
            raise ValueError(f"{START_TIMEOUT_VARIABLES[0]}={start_timeout!r} is not a number of seconds") from None
        elastic_timeout = environ.get(ELASTIC_TIMEOUT_VARIABLE, "600")
        try:
            elastic_timeout = float(elastic_timeout)
        except ValueError:
            raise ValueError(f"{ELASTIC_TIMEOUT_VARIABLE}={elastic_timeout!r} is not a number of seconds") from None
        return cls(
            rendezvous_addr=_first(environ, RENDEZVOUS_ADDR_VARIABLES) or None,
            rendezvous_port=_port(environ, RENDEZVOUS_PORT_VARIABLES),
            secret=_first(environ, (SECRET_VARIABLE,)) or None,
            launcher_size=_size_from(environ),
            start_timeout=start_timeout,
            elastic=environ.get(ELASTIC_VARIABLE) == "1",
            worker_id=environ.get(WORKER_VARIABLE, ""),
            elastic_timeout=elastic_timeout,
            timeline=timeline,
            metrics_port=_metrics_port(environ),
            metrics_address=environ.get(METRICS_ADDRESS_VARIABLE, "").strip() or DEFAULT_METRICS_ADDRESS,
            monitor_interval=environ.get(MONITOR_INTERVAL_VARIABLE, "").strip(),
            launcher_environment=dict(environ),
        )

    def core_settings(self):
        """{field: value} of the fields the core takes from this Config
        instead of the environment (those that are not None)."""
        settings = {name: getattr(self, name) for name in CORE_FIELDS if getattr(self, name) is not None}
        if self.elastic_round < 0:
            settings.pop("elastic_round")
        return settings

    def store_address(self):
        """(address, port, secret) of the job's rendezvous server, or None
        when the launcher named none."""
        if self.rendezvous_addr and self.rendezvous_port and self.secret:
            return self.rendezvous_addr, self.rendezvous_port, self.secret
        return None
