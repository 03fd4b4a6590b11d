"""horovodrun's flags as Horovod 0.28 defines them, and what each means on
hora: the parser, the flags without effect, the unsupported ones and the
HOROVOD_* variables some set. horovodrun.py runs them; usage.py reads them
to point a horarun user who typed one to its meaning."""

import argparse
import importlib
import importlib.util
import sys
import textwrap

HOROVOD_VERSION = "0.28.1"   # the horovodrun whose flags these are

# Flags accepted with a note: (option strings, number of values, why).
NO_EFFECT = [
    (("--disable-cache",), 0, "hora runs no cached start-up checks"),
    (("--cycle-time-ms",), 1, "hora negotiates when work arrives, without a cycle"),
    (("--hierarchical-allreduce", "--no-hierarchical-allreduce"), 0,
     "hora chooses its transports itself (shared memory within a host, Gloo or MPI between hosts)"),
    (("--hierarchical-allgather", "--no-hierarchical-allgather"), 0,
     "hora chooses its transports itself (shared memory within a host, Gloo or MPI between hosts)"),
    (("--torus-allreduce", "--no-torus-allreduce"), 0, "hora has no NCCL torus allreduce"),
    (("--autotune", "--no-autotune"), 0, "hora has no autotuner; set --fusion-threshold-mb yourself"),
    (("--autotune-log-file",), 1, "hora has no autotuner"),
    (("--autotune-warmup-samples",), 1, "hora has no autotuner"),
    (("--autotune-steps-per-sample",), 1, "hora has no autotuner"),
    (("--autotune-bayes-opt-max-samples",), 1, "hora has no autotuner"),
    (("--autotune-gaussian-process-noise",), 1, "hora has no autotuner"),
    (("--mpi-threads-disable", "--no-mpi-threads-disable"), 0,
     "hora asks MPI for the thread level it needs and reports it through mpi_threads_supported()"),
    (("--tcp",), 0, "hora always uses TCP between hosts"),
    (("--binding-args",), 1, "it applies to jsrun/Spectrum MPI only"),
    (("--num-nccl-streams",), 1, "hora does not use NCCL"),
    (("--ccl-bgt-affinity",), 1, "hora does not use oneCCL"),
    (("--thread-affinity",), 1, "hora does not pin its threads"),
    (("--log-level",), 1, "hora prints warnings and errors only"),
    (("--log-with-timestamp", "--log-without-timestamp", "--log-hide-timestamp",
      "--no-log-hide-timestamp"), 0, "hora's own messages carry no timestamps"),
]

# Flags refused: (option strings, number of values, what is missing).
NOT_SUPPORTED = [
    (("--jsrun",), 0, "launching through jsrun (LSF); use --mpi or -H"),
]

# Elastic training's flags, passed to horarun as they are: (flags, nargs, dest).
ELASTIC = [
    (("--min-np", "--min-num-proc"), None, "min_np"),
    (("--max-np", "--max-num-proc"), None, "max_np"),
    (("--slots-per-host", "--slots"), None, "slots_per_host"),
    (("--elastic-timeout",), None, "elastic_timeout"),
    (("--reset-limit",), None, "reset_limit"),
    (("--blacklist-cooldown-range",), 2, "blacklist_cooldown_range"),
    (("--host-discovery-script",), None, "host_discovery_script"),
]

# Horovod's --config-file: section -> key -> the flag it stands for (dest,
# or a NO_EFFECT flag). A flag given on the command line wins over the file.
CONFIG_KEYS = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "--cycle-time-ms",
               "cache_capacity": "cache_capacity", "hierarchical_allreduce": "--hierarchical-allreduce",
               "hierarchical_allgather": "--hierarchical-allgather"},
    "autotune": {"enabled": "--autotune", "log_file": "--autotune-log-file",
                 "warmup_samples": "--autotune-warmup-samples", "steps_per_sample": "--autotune-steps-per-sample",
                 "bayes_opt_max_samples": "--autotune-bayes-opt-max-samples",
                 "gaussian_process_noise": "--autotune-gaussian-process-noise"},
    "timeline": {"filename": "timeline_filename", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "no_stall_check", "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "library_options": {"mpi_threads_disable": "--mpi-threads-disable", "num_nccl_streams": "--num-nccl-streams",
                        "ccl_bgt_affinity": "--ccl-bgt-affinity", "gloo_timeout_seconds": "gloo_timeout_seconds"},
    "logging": {"level": "--log-level", "with_timestamp": "--log-with-timestamp"},
}
# The types of the keys that map onto a setting: (type, must not be negative).
CONFIG_TYPES = {"fusion_threshold_mb": (int, True), "cache_capacity": (int, True), "timeline_filename": (str, False),
                "timeline_mark_cycles": (bool, False), "no_stall_check": (bool, False),
                "stall_check_warning_time_seconds": (int, True), "stall_check_shutdown_time_seconds": (int, True),
                "gloo_timeout_seconds": (int, True)}

# Horovod's tuning flags that hora reads as HOROVOD_* variables:
# dest -> (variable, conversion of the flag's value).
ENVIRONMENT = {
    "fusion_threshold_mb": ("HOROVOD_FUSION_THRESHOLD", lambda mb: str(mb * 1024 * 1024)),
    "cache_capacity": ("HOROVOD_CACHE_CAPACITY", str),
    "no_stall_check": ("HOROVOD_STALL_CHECK_DISABLE", lambda off: "1" if off else "0"),
    "stall_check_warning_time_seconds": ("HOROVOD_STALL_CHECK_TIME_SECONDS", str),
    "stall_check_shutdown_time_seconds": ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", str),
    "gloo_timeout_seconds": ("HOROVOD_GLOO_TIMEOUT_SECONDS", str),
}

_noted = set()


def note_once(flag, reason, prog="horovodrun"):
    """Prints, once per process and flag, that `flag` has no effect on hora."""
    if flag not in _noted:
        _noted.add(flag)
        print(f"{prog}: {flag} has no effect on hora: {reason}", file=sys.stderr, flush=True)


def not_supported_message(flag, what):
    return f"{flag} is not supported by hora yet ({what})"


class _NoEffect(argparse.Action):
    def __init__(self, option_strings, dest, reason, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.reason = reason

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.no_effect.setdefault(option_string, self.reason)


class _NotSupported(argparse.Action):
    def __init__(self, option_strings, dest, what, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.what = what

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(not_supported_message(option_string, self.what))


class _CheckBuild(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(check_build_report())
        parser.exit(0)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="horovodrun", description="Horovod's launcher, running the job on hora (through horarun).")
    parser.add_argument("-v", "--version", action="version", version=HOROVOD_VERSION)
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int)
    parser.add_argument("-cb", "--check-build", action=_CheckBuild, nargs=0)
    parser.add_argument("--start-timeout", type=int)
    parser.add_argument("--output-filename")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp", action="store_true",
                        dest="prefix_output_with_timestamp")
    parser.add_argument("-p", "--ssh-port", type=int)
    parser.add_argument("-i", "--ssh-identity-file")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts")
    hosts.add_argument("-hostfile", "--hostfile")
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--gloo", action="store_true", dest="use_gloo")
    controller.add_argument("--mpi", action="store_true", dest="use_mpi")
    parser.add_argument("--mpi-args")
    parser.add_argument("--fusion-threshold-mb", type=int)
    parser.add_argument("--cache-capacity", type=int)
    stall = parser.add_mutually_exclusive_group()
    stall.add_argument("--no-stall-check", action="store_const", const=True, dest="no_stall_check")
    stall.add_argument("--stall-check", action="store_const", const=False, dest="no_stall_check")
    parser.add_argument("--stall-check-warning-time-seconds", type=int)
    parser.add_argument("--stall-check-shutdown-time-seconds", type=int)
    parser.add_argument("--gloo-timeout-seconds", type=int)
    parser.add_argument("--timeline-filename")
    parser.add_argument("--network-interface", "--network-interfaces", dest="network_interfaces")
    for flags, nargs, dest in ELASTIC:
        parser.add_argument(*flags, dest=dest, nargs=nargs)
    parser.add_argument("--config-file")
    marks = parser.add_mutually_exclusive_group()
    marks.add_argument("--timeline-mark-cycles", action="store_true", dest="timeline_mark_cycles")
    marks.add_argument("--no-timeline-mark-cycles", action="store_false", dest="timeline_mark_cycles")
    for flags, nargs, reason in NO_EFFECT:
        parser.add_argument(*flags, action=_NoEffect, nargs=nargs, reason=reason, dest=argparse.SUPPRESS,
                            metavar="VALUE" if nargs else None, help=f"no effect on hora: {reason}")
    for flags, nargs, what in NOT_SUPPORTED:
        parser.add_argument(*flags, action=_NotSupported, nargs=nargs, what=what, dest=argparse.SUPPRESS,
                            metavar="VALUE" if nargs else None, help=f"not supported yet: {what}")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs")
    parser.set_defaults(no_effect={})
    return parser


def framework_available(name):
    """Whether framework `name` imports in this Python and hora has a front
    end for it (hora.<name>)."""
    if importlib.util.find_spec(name) is None or importlib.util.find_spec(f"hora.{name}") is None:
        return False
    try:
        importlib.import_module(name)
    except Exception:   # installed but broken (MXNet 1.9 with NumPy >= 1.24, say)
        return False
    return True


def check_build_report():
    """Horovod's --check-build table, for this installation of hora: a
    framework is marked when it imports in this Python."""
    from hora import _core

    def mark(flag):
        return "X" if flag else " "

    tensorflow, torch, mxnet = (framework_available(name) for name in ("tensorflow", "torch", "mxnet"))
    mpi = _core.mpi_built()
    return textwrap.dedent(f"""\
        Horovod v{HOROVOD_VERSION} (hora):

        Available Frameworks:
            [{mark(tensorflow)}] TensorFlow
            [{mark(torch)}] PyTorch
            [{mark(mxnet)}] MXNet

        Available Controllers:
            [{mark(mpi)}] MPI
            [X] Gloo

        Available Tensor Operations:
            [ ] NCCL
            [ ] DDL
            [ ] CCL
            [{mark(mpi)}] MPI
            [X] Gloo""")
