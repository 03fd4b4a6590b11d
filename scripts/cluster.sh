#!/bin/sh
# A cluster of simulated hosts on this machine (root only): each host is a
# network namespace with its own address, its own host name (a UTS
# namespace entered by `exec`) and a name in /etc/hosts, joined to the others
# through a bridge; links may be rate limited. Tests and benchmarks use it to
# run jobs "across hosts" (docs/launcher.md, "A simulated cluster").
#
#   scripts/cluster.sh up N [RATE]       make hosts NAME-host1 .. NAME-hostN (RATE: a tc rate,
#                                        e.g. 10gbit, limits both directions of every link)
#   scripts/cluster.sh down              remove them
#   scripts/cluster.sh hosts             print the host names, one a line
#   scripts/cluster.sh exec [OPTIONS] HOST COMMAND...
#                                        run COMMAND (joined by spaces, through sh, as ssh
#                                        does) on HOST, standard input kept: the shape of ssh,
#                                        so `horarun --launch-agent "scripts/cluster.sh exec"`
#                                        and Open MPI's plm_rsh_agent take it; ssh-style
#                                        options before HOST (-o X, -p X, -x ...) are ignored
#   scripts/cluster.sh link HOST up|down cut or restore HOST's link (fault tests)
#
# HORA_CLUSTER (default "hora", at most 8 characters) names the cluster, so
# that two may exist at once; HORA_CLUSTER_SUBNET (default 10.231.0) is its
# /24: hosts are .1 .. .N, this machine's end of the bridge is .254.
set -eu

NAME=${HORA_CLUSTER:-hora}
SUBNET=${HORA_CLUSTER_SUBNET:-10.231.0}
BRIDGE="$NAME-br"
HOSTS_BEGIN="# hora cluster $NAME begin"
HOSTS_END="# hora cluster $NAME end"

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

need_root() {
  [ "$(id -u)" = 0 ] || die "making network namespaces needs root"
  for tool in ip unshare; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian: iproute2, util-linux)"
  done
}

host_name() { echo "$NAME-host$1"; }

# The namespaces of this cluster, in order.
cluster_hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-host[0-9]+\$" | sort -t t -k 2 -n || true
}

remove_hosts_entries() {
  [ -w /etc/hosts ] || return 0
  # /etc/hosts may be a bind mount: rewrite it in place.
  kept=$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' /etc/hosts)
  printf '%s\n' "$kept" > /etc/hosts
}

down() {
  need_root
  for host in $(cluster_hosts); do
    ip netns delete "$host"
  done
  # A namespace that a process still holds outlives its name, and with it
  # the host's end of a link: delete this machine's ends by name.
  for link in $(ip -o link show | sed -n "s/^[0-9]*: \($NAME-v[0-9]*\)@.*/\1/p"); do
    ip link delete "$link" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
  remove_hosts_entries
}

limit() {  # DEVICE RATE [NAMESPACE]
  if [ -n "${3:-}" ]; then
    ip netns exec "$3" tc qdisc replace dev "$1" root tbf rate "$2" burst 1mb latency 50ms
  else
    tc qdisc replace dev "$1" root tbf rate "$2" burst 1mb latency 50ms
  fi
}

up() {
  count=$1
  rate=${2:-}
  case "$count" in '' | *[!0-9]*) die "up: the number of hosts must be a number, got '$count'" ;; esac
  [ "$count" -ge 1 ] && [ "$count" -le 250 ] || die "up: between 1 and 250 hosts, got $count"
  [ ${#NAME} -le 8 ] || die "HORA_CLUSTER must be at most 8 characters, got '$NAME'"
  if [ -n "$rate" ]; then command -v tc >/dev/null || die "tc is missing (Debian: iproute2)"; fi
  down
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  entries="$HOSTS_BEGIN"
  i=1
  while [ "$i" -le "$count" ]; do
    host=$(host_name "$i")
    outer="$NAME-v$i"
    ip netns add "$host"
    ip link add "$outer" type veth peer name eth0 netns "$host"
    ip link set "$outer" master "$BRIDGE" up
    ip -n "$host" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$host" link set eth0 up
    ip -n "$host" link set lo up
    ip -n "$host" route add default via "$SUBNET.254"
    if [ -n "$rate" ]; then
      limit eth0 "$rate" "$host"   # the host's sending side
      limit "$outer" "$rate"       # the bridge's side toward the host
    fi
    entries="$entries
$SUBNET.$i $host"
    i=$((i + 1))
  done
  remove_hosts_entries
  printf '%s\n%s\n' "$entries" "$HOSTS_END" >> /etc/hosts
  cluster_hosts
}

run_on() {
  # Skip ssh's options, as Open MPI and horarun may pass some.
  while [ $# -gt 0 ]; do
    case "$1" in
      -o | -p | -i | -l | -F | -E | -J) shift 2 ;;
      --) shift; break ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  [ $# -ge 2 ] || die "exec: usage: exec [OPTIONS] HOST COMMAND..."
  host=$1
  shift
  ip netns list | awk '{print $1}' | grep -qx "$host" || die "exec: no simulated host '$host' (scripts/cluster.sh hosts)"
  # ssh runs its arguments joined by spaces through the remote shell.
  exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
}

link() {
  need_root
  [ $# -eq 2 ] || die "link: usage: link HOST up|down"
  case "$2" in up | down) ;; *) die "link: up or down, got '$2'" ;; esac
  index=${1#"$NAME-host"}
  case "$index" in '' | *[!0-9]*) die "link: no simulated host '$1'" ;; esac
  ip link set "$NAME-v$index" "$2"
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
  up) need_root; [ $# -ge 1 ] || die "up: usage: up N [RATE]"; up "$@" ;;
  down) down ;;
  hosts) cluster_hosts ;;
  exec) run_on "$@" ;;
  link) link "$@" ;;
  *) die "usage: cluster.sh up N [RATE] | down | hosts | exec HOST COMMAND... | link HOST up|down" ;;
esac
