"""horarun's command line beyond argparse: its version, the example and the
environment variables in --help, and the check that every option before the
command is one horarun knows, wherever it stands."""

import importlib.metadata

from hora.runner import horovodrun_flags

# The variables hora reads (src/util/env.cc), for the --help text and
# docs/launcher.md: (HORA_ name, Horovod's name or None, meaning, default).
# horarun itself sets each rank's coordinates and rendezvous variables.
ENVIRONMENT = [
    ("HORA_OP_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS",
     "how long an op waits for the set's members; then the set breaks", "600"),
    ("HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT", "world rendezvous timeout in seconds (under horarun, the "
     "default of --start-timeout, whose value the ranks then get)",
     "horarun's --start-timeout (30); 120 without horarun"),
    ("HORA_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS",
     "warn about ops some members have not submitted after this long", "60"),
    ("HORA_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", "1: no stall warnings", "0"),
    ("HORA_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
     "fail the set once an op waits this long for members (0: only the op timeout)", "0"),
    ("HORA_DIVERGENCE_TIMEOUT_SECONDS", None,
     "fail the ops of ranks that diverged once nothing was submitted or finished for this long (the set goes "
     "on; 0: only the op timeout)", "60"),
    ("HORA_LINK_TIMEOUT_SECONDS", None,
     "a control connection to another host that gets no answer for this long breaks its set (0: only the op "
     "timeout)", "15"),
    ("HORA_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "bytes of small allreduces packed into one",
     "67108864"),
    ("HORA_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "response-cache slots per set (0 disables)", "1024"),
    ("HORA_BACKEND", "HOROVOD_CPU_OPERATIONS", "tcp (hora's own), gloo or mpi (also HOROVOD_CONTROLLER, "
     "whose gloo means tcp)", "mpi under mpirun or srun, else tcp"),
    ("HORA_MPI_LIBRARY", None, "the MPI library the MPI backend loads, a file name or a path",
     "the one hora was built with"),
    ("HORA_SHM", None, "0: sets within one host use the network backend, not shared memory", "1"),
    ("HORA_BIND", None, "auto: where one machine runs more of the job's ranks than it has CPUs and they belong to "
     "several hosts, each rank keeps its threads on one CPU, a host's ranks together; none: never", "auto"),
    ("HORA_AGREEMENT", None, "sets without shared memory agree on repeated ops by records between the hosts' "
     "leaders where every host shares a segment (leaders), by every member's records (stream), or negotiate every "
     "op with their coordinator (negotiated)", "leaders"),
    ("HORA_PROGRESS_POOL", None, "0: every process set gets a progress thread of its own instead of sharing the rank's pool",
     "1"),
    ("HORA_SHM_SLOT_BYTES", None, "bytes of each member's shared-memory slot (a multiple of 4096)",
     "1 MiB"),
    ("HORA_TIMELINE", "HOROVOD_TIMELINE", "start the timeline (a Chrome trace) at init, into this file",
     "none"),
    ("HORA_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", "1: mark each batch of work in the timeline",
     "0"),
    ("HORA_MONITOR_INTERVAL", None, "publish this rank's per-set counters to horarun's store every this many "
     "seconds (horarun --monitor sets it)", "none"),
    ("HORA_METRICS_PORT", None, "serve each rank's per-set counters in the Prometheus text format on this port "
     "plus its local rank (docs/observability.md)", "none"),
    ("HORA_METRICS_ADDR", None, "the address each rank's metrics endpoint listens on (0.0.0.0: every "
     "interface, for a scraper on another host)", "127.0.0.1"),
    ("HORA_NETWORK_INTERFACES", "HOROVOD_GLOO_IFACE", "network interfaces, comma-separated, in order of "
     "preference: a rank listens on the address of the first its host has (horarun --network-interfaces "
     "sets it)", "the address horarun gives the rank"),
    ("HORA_ELASTIC_ROUND", None, "the elastic driver's rendezvous round a worker joins (an elastic worker's "
     "init() gives the core the round it joined; docs/elastic.md)", "none"),
    ("HORA_HOST_IDENTITY", None, "added to this host's identity: ranks with different values do not share "
     "memory (tests simulate several hosts on one)", "empty"),
]

# Set by horarun for every rank (HORA_ and HOROVOD_ spellings; Horovod's
# GLOO_RENDEZVOUS_ADDR and _PORT are read as well), or by mpirun.
SET_BY_LAUNCHER = ["RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME",
                   "RENDEZVOUS_ADDR", "RENDEZVOUS_PORT", "SECRET", "GLOO_RENDEZVOUS_ADDR",
                   "GLOO_RENDEZVOUS_PORT"]

EXAMPLES = """\
examples:
  horarun -np 4 python train.py
  horarun -np 8 -H a:4,b:4 python train.py
  horarun --keep-going -np 4 python hpo.py        # other process sets finish after a failure
  horarun --monitor -np 4 python multitask.py     # a line per process set every 2 s, a summary at the end
  horarun --timeline-filename trace.json -np 4 python train.py
  HORA_OP_TIMEOUT_SECONDS=60 horarun -np 4 python train.py
"""


def version():
    """hora's version, from the installed package's metadata."""
    try:
        return importlib.metadata.version("hora")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (hora is not installed)"


def epilog():
    rows = []
    for name, horovod_name, meaning, default in ENVIRONMENT:
        names = name + (f" / {horovod_name}" if horovod_name else "")
        rows.append(f"  {names}\n      {meaning} (default: {default})")
    return (EXAMPLES + "\nenvironment variables the ranks read (every one is passed on to them):\n"
            + "\n".join(rows)
            + "\n\nhorarun sets each rank's HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, ... (and the HOROVOD_ "
              "names).\nWhen a rank fails, horarun names the rank that failed first, shows the end of its "
              "stderr,\nand lists the ranks that failed because of it. See docs/launcher.md.\n")


def _takes_value(action):
    """Whether the option's next word is its value (for an optional value,
    once with_optional_values() has given it one)."""
    return action.nargs != 0


def _value_fits(action, word):
    try:
        (action.type or str)(word)
    except (TypeError, ValueError):
        return False
    return True


def with_optional_values(parser, argv):
    """`argv` where an option with an optional value (--monitor [SECONDS])
    that stands before the command without one gets its default attached
    (--monitor=2), so that argparse does not take the command's first word
    for its value."""
    known = parser._option_string_actions
    argv = list(argv)
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--" or not token.startswith("-") or token == "-":
            break
        action = known.get(token)
        if action is not None and action.nargs == "?":
            following = argv[index + 1] if index + 1 < len(argv) else None
            if following is None or not _value_fits(action, following):
                argv[index] = f"{token}={action.const}"
        index += 1
        if action is not None and _takes_value(action) and "=" not in argv[index - 1]:
            index += 1
    return argv


def first_unknown_option(parser, argv):
    """The first option before the command (or before '--') that `parser`
    does not know, or None. Values of known options are skipped."""
    known = parser._option_string_actions   # option string -> argparse action
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--" or not token.startswith("-") or token == "-":
            return None
        name = token.split("=", 1)[0]
        action = known.get(name)
        if action is None and not token.startswith("--") and token[:2] in known:
            action, name = known[token[:2]], token[:2]   # a short option with its value attached: -Ha:2
            if not _takes_value(action) or len(token) == 2:
                return token
            index += 1
            continue
        if action is None:
            return name
        index += 1
        if _takes_value(action) and "=" not in token:
            index += 1
    return None


# Other launchers' names for the number of processes (mpirun's -n,
# torchrun's --nproc_per_node): horarun's is -np.
RANK_COUNT_OPTIONS = ("-n", "--n", "--np", "--nproc_per_node", "--nproc-per-node", "--nprocs")


def unknown_option_message(option):
    """The error for an option horarun does not know, with a hint where
    another launcher or horovodrun knows it."""
    message = f"unknown option {option}"
    if option in RANK_COUNT_OPTIONS or (option.startswith("-n") and option[2:].isdigit()):
        return f"{message}: did you mean -np? (horarun -np N: the number of ranks)"
    action = horovodrun_flags.build_parser()._option_string_actions.get(option)
    if action is None:
        return message + " (see horarun --help)"
    if hasattr(action, "what"):
        return f"{message}: a horovodrun flag for {action.what}, which hora does not support yet"
    if hasattr(action, "reason"):
        return f"{message}: a horovodrun flag without effect on hora ({action.reason})"
    variable = horovodrun_flags.ENVIRONMENT.get(action.dest, (None,))[0]
    if variable:
        return (f"{message}: a horovodrun flag; horovodrun takes it, and horarun's ranks read the "
                f"setting from {variable}")
    return f"{message}: a horovodrun flag; horovodrun takes it (see docs/compat.md)"
