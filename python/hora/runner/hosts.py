"""Host lists for horarun: parsing -H and --hostfile, and placing ranks on hosts."""

import dataclasses
import re
import socket

# A DNS name or an IPv4 address. IPv6 literals are not accepted: ':' separates
# the slot count.
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")

LOCAL_NAMES = ("localhost", "127.0.0.1")


class HostSpecError(ValueError):
    """A host list or hostfile that cannot be parsed."""


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    slots: int


@dataclasses.dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs and its coordinates in the job (Horovod's meaning:
    the cross ranks of local rank l are the hosts that have a rank l)."""
    rank: int
    size: int
    host: str
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def check_host_name(name, source):
    """HostSpecError naming `source` unless `name` is a DNS name or an IPv4
    address: anything else (a leading '-' that ssh would read as an
    option, spaces, quotes) is refused wherever host names come from."""
    if not _HOST_NAME.fullmatch(name):
        raise HostSpecError(f"{source}: {name!r} is not a host name")


def _parse_entry(name, slots_text, source):
    check_host_name(name, source)
    try:
        slots = int(slots_text)
    except ValueError:
        slots = 0
    if slots <= 0:
        raise HostSpecError(f"{source}: the slot count of {name!r} must be a positive "
                            f"integer, got {slots_text!r}")
    return Host(name, slots)


def _reject_duplicates(hosts, source):
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise HostSpecError(f"{source}: host {host.name!r} is listed twice")
        seen.add(host.name)
    return hosts


def parse_host_list(spec):
    """Parses -H: 'a:4,b:4'; a host without ':slots' has one slot."""
    hosts = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            raise HostSpecError(f"-H {spec!r}: empty host entry")
        name, sep, slots = item.partition(":")
        hosts.append(_parse_entry(name, slots if sep else "1", f"-H entry {item!r}"))
    return _reject_duplicates(hosts, f"-H {spec!r}")


def parse_hostfile(path):
    """Parses a hostfile: one host per line as 'name slots=N', 'name:N' or
    'name' (one slot); '#' starts a comment."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as error:
        raise HostSpecError(f"--hostfile {path}: {error.strerror}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        source = f"{path}:{number}"
        fields = line.split()
        name, sep, slots = fields[0].partition(":")
        if len(fields) == 2 and not sep and fields[1].startswith("slots="):
            slots = fields[1][len("slots="):]
        elif len(fields) != 1:
            raise HostSpecError(f"{source}: expected 'host slots=N', got {line!r}")
        elif not sep:
            slots = "1"
        hosts.append(_parse_entry(name, slots, source))
    if not hosts:
        raise HostSpecError(f"--hostfile {path}: no hosts")
    return _reject_duplicates(hosts, f"--hostfile {path}")


def is_local(name):
    """True when `name` is this machine (spawned without ssh)."""
    if name in LOCAL_NAMES or name.startswith("127."):
        return True
    own = socket.gethostname()
    return name in (own, own.split(".", 1)[0])


def place_ranks(hosts, num_ranks):
    """Assigns ranks host by host, filling each host's slots in order; hosts
    left without ranks are dropped."""
    if num_ranks <= 0:
        raise HostSpecError(f"the number of ranks must be at least 1, got {num_ranks}")
    total = sum(h.slots for h in hosts)
    if num_ranks > total:
        listed = ",".join(f"{h.name}:{h.slots}" for h in hosts)
        raise HostSpecError(f"{num_ranks} ranks need {num_ranks} slots but the hosts "
                            f"offer only {total} ({listed})")
    local_sizes = []
    left = num_ranks
    for host in hosts:
        if left == 0:
            break
        local_sizes.append((host.name, min(host.slots, left)))
        left -= local_sizes[-1][1]
    placements = []
    for host_index, (name, local_size) in enumerate(local_sizes):
        for local_rank in range(local_size):
            # The hosts that have a rank with this local rank, in host order.
            cross = [i for i, (_, size) in enumerate(local_sizes) if size > local_rank]
            placements.append(RankPlacement(
                rank=len(placements), size=num_ranks, host=name,
                local_rank=local_rank, local_size=local_size,
                cross_rank=cross.index(host_index), cross_size=len(cross)))
    return placements


def outward_address(remote_host):
    """This machine's address on the route to `remote_host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((remote_host, 9))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()
