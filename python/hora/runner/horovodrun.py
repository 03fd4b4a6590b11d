"""horovodrun on hora: Horovod's launcher flags mapped onto horarun's.

    horovodrun -np 4 -H a:2,b:2 python train.py

Every flag of Horovod 0.28's horovodrun is accepted or refused by name:
- flags with a meaning on hora map onto horarun's (-np, -H, --hostfile,
  --start-timeout, --ssh-port, --mpi, --output-filename, the timeline's
  --timeline-filename and --timeline-mark-cycles, ...) or onto the
  HOROVOD_* variables hora reads (--fusion-threshold-mb, --cache-capacity,
  the stall check, --gloo-timeout-seconds);
- flags that have no meaning on hora (tuning knobs of machinery hora does
  not have) are accepted, and one line on stderr says so, once per flag;
- the elastic flags go to horarun's elastic driver (docs/elastic.md);
- flags hora does not support (jsrun) stop with an error naming them.
--config-file reads Horovod's YAML configuration; --network-interfaces
chooses the interfaces the ranks listen on.
The shim package (compat/horovod) installs this as the `horovodrun` script.
"""

import os
import sys

from hora.runner import launch, usage
from hora.runner.horovodrun_flags import (  # noqa: F401
    CONFIG_KEYS,
    CONFIG_TYPES,
    ELASTIC,
    ENVIRONMENT,
    HOROVOD_VERSION,
    NO_EFFECT,
    NOT_SUPPORTED,
    _noted,
    build_parser,
    check_build_report,
    framework_available,
    not_supported_message,
    note_once,
)

def horarun_arguments(args):
    """horarun's command line for parsed horovodrun `args`."""
    argv = [] if args.num_proc is None else ["-np", str(args.num_proc)]
    for flag, value in (("-H", args.hosts), ("--hostfile", args.hostfile),
                        ("--start-timeout", args.start_timeout), ("--ssh-port", args.ssh_port),
                        ("--ssh-identity-file", args.ssh_identity_file),
                        ("--output-filename", args.output_filename), ("--mpi-args", args.mpi_args),
                        ("--timeline-filename", args.timeline_filename)):
        if value is not None:
            argv += [flag, str(value)]
    if args.network_interfaces is not None:
        argv += ["--network-interfaces", args.network_interfaces]
    for flags, _, dest in ELASTIC:
        value = getattr(args, dest)
        if value is not None:
            argv += [flags[0], *(value if isinstance(value, list) else [value])]
    if args.use_mpi:
        argv.append("--mpi")
    if args.verbose:
        argv.append("-v")
    if args.prefix_output_with_timestamp:
        argv.append("--prefix-output-with-timestamp")
    if args.timeline_mark_cycles:
        argv.append("--timeline-mark-cycles")
    return argv + ["--"] + list(args.command)


def environment_settings(args):
    """The HOROVOD_* variables that horovodrun `args` set for the ranks."""
    return {name: convert(getattr(args, dest)) for dest, (name, convert) in ENVIRONMENT.items()
            if getattr(args, dest) is not None}


def given_on_command_line(parser, argv):
    """The dests of the options in `argv` before the command."""
    given = set()
    tokens = iter(argv)
    for token in tokens:
        if token == "--" or not token.startswith("-"):
            break
        action = parser._option_string_actions.get(token.split("=", 1)[0])
        if action is None:
            continue
        given.add(action.dest)
        values = 1 if action.nargs is None else action.nargs if isinstance(action.nargs, int) else 0
        if "=" not in token:
            for _ in range(values):
                next(tokens, None)
    return given


def _config_value(where, dest, value):
    kind, non_negative = CONFIG_TYPES[dest]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"{where} must not be negative, got {value}")
    return value


def apply_config_file(args, path, given):
    """Sets `args` from Horovod's YAML configuration at `path`, except what
    the command line `given` set; raises ValueError naming what is wrong."""
    try:
        import yaml
    except ImportError:
        raise ValueError("--config-file needs PyYAML (pip install pyyaml)") from None
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as error:
        raise ValueError(f"cannot read --config-file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"--config-file {path} is not valid YAML: {error}") from None
    if config is None:
        return
    if not isinstance(config, dict):
        raise ValueError(f"--config-file {path} must hold a mapping of sections, got {type(config).__name__}")
    for section, values in config.items():
        if section == "controller":
            if not isinstance(values, str) or values.lower() not in ("gloo", "mpi"):
                raise ValueError(f"{path}: controller must be gloo or mpi, got {values!r}")
            if not ({"use_gloo", "use_mpi"} & given):
                args.use_mpi, args.use_gloo = values.lower() == "mpi", values.lower() == "gloo"
            continue
        keys = CONFIG_KEYS.get(section)
        if keys is None:
            raise ValueError(f"{path}: unknown section {section!r} (Horovod's are controller, "
                             f"{', '.join(CONFIG_KEYS)})")
        if not isinstance(values, dict):
            raise ValueError(f"{path}: section {section!r} must be a mapping, got {type(values).__name__}")
        for key, value in values.items():
            target = keys.get(key)
            where = f"{path}: {section}.{key}"
            if target is None:
                raise ValueError(f"{path}: unknown key {key!r} in section {section!r} (it takes "
                                 f"{', '.join(keys)})")
            if target.startswith("--"):
                if value not in (None, False):
                    args.no_effect.setdefault(f"{section}.{key} in --config-file", _no_effect_reason(target))
                continue
            value = _config_value(where, target, value)
            if target == "no_stall_check":
                value = not value   # the file says whether the check is enabled
            if target not in given:
                setattr(args, target, value)


def _no_effect_reason(flag):
    for flags, _, reason in NO_EFFECT:
        if flag in flags:
            return reason
    return "hora has no such setting"


def parse_args(argv):
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        option = unknown[0].split("=", 1)[0]
        if option in usage.RANK_COUNT_OPTIONS:
            parser.error(f"unrecognized argument {option}: did you mean -np? (horovodrun -np N: the number "
                         "of processes)")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.config_file is not None:
        try:
            apply_config_file(args, args.config_file, given_on_command_line(parser, argv))
        except ValueError as error:
            parser.error(str(error))
    if args.network_interfaces is not None and not [n for n in args.network_interfaces.split(",") if n]:
        parser.error("--network-interfaces names no interface")
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    elastic = args.min_np is not None or args.max_np is not None or args.host_discovery_script is not None
    if args.num_proc is None and not elastic:
        parser.error("-np/--num-proc is required")
    if not args.command:
        parser.error("no command to run")
    if args.mpi_args and not args.use_mpi:
        args.no_effect.setdefault("--mpi-args", "it applies with --mpi only (hora's default launcher is "
                                                "its own, with Gloo)")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for flag, reason in args.no_effect.items():
        note_once(flag, reason)
    os.environ.update(environment_settings(args))
    return launch.main(horarun_arguments(args))


if __name__ == "__main__":
    sys.exit(main())
