#!/usr/bin/env bash
# Two "hosts" on one machine for the multi-node tests (docs/architecture.md §10 "Two
# hosts"): two network namespaces joined by a veth pair, each with its own address, its
# own host name and its own "local disk".
#
#   scripts/netns_hosts.sh up STATE_DIR [TAG]   make them; TAG (default: this shell's PID)
#                                               makes the names unique per run
#   scripts/netns_hosts.sh down STATE_DIR       delete what `up` made (safe to repeat)
#
# `up` writes into STATE_DIR (which must exist and be empty of these files):
#   hosts.env    shell variables: NS_A NS_B (namespace names), HOST_A HOST_B (the host
#                names, nodea and nodeb), IP_A IP_B (10.77.X.1 and .2), SUBNET
#                (10.77.X.0/24), LOCAL (the common "local disk" path), DISK_A DISK_B
#                (what LOCAL shows on each host)
#   agent        an rsh agent for Open MPI (`--mca plm_rsh_agent STATE_DIR/agent`):
#                `agent HOST CMD...` runs CMD in HOST's namespace with HOST as its UTS host
#                name and DISK_<host> bind-mounted over LOCAL in a private mount namespace
#   run-on       `run-on HOST CMD...`: the same for one command (exec'd, status kept)
# X is derived from TAG (1..250) so that concurrent runs also differ in their addresses.
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and util-linux's unshare.
# Exits 77 (the tests' "skip") with one line on stderr when any of that is missing or
# `ip netns add` is not permitted; any other failure exits 1 after undoing what was made.
set -euo pipefail

usage() { echo "usage: $0 up STATE_DIR [TAG] | down STATE_DIR" >&2; exit 2; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[ $# -ge 2 ] || usage
cmd=$1 state=$2
[ -d "$state" ] || { echo "$0: state directory '$state' does not exist" >&2; exit 2; }
state=$(cd "$state" && pwd)

down() {
  [ -f "$state/hosts.env" ] || return 0
  # shellcheck disable=SC1091
  . "$state/hosts.env"
  # What still runs on a host (an orted or rank a killed mpirun left) was started there
  # by this run: SIGTERM by PID, SIGKILL to what is left after 2 s. Deleting a namespace
  # then also deletes the veth end in it, and with it its peer.
  local ns pids
  # shellcheck disable=SC2153  # NS_A and NS_B come from hosts.env
  for ns in "$NS_A" "$NS_B"; do
    ip netns list 2>/dev/null | cut -d" " -f1 | grep -qx -- "$ns" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq 20); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] && break
        sleep 0.1
      done
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns delete "$ns" || echo "$0: could not delete namespace $ns" >&2
  done
  rm -f "$state/hosts.env" "$state/run-on" "$state/agent"
}

case $cmd in
  down) down; exit 0 ;;
  up) ;;
  *) usage ;;
esac

tag=${3:-$$}
[[ $tag =~ ^[A-Za-z0-9]+$ ]] || { echo "$0: TAG '$tag' must be letters and digits" >&2; exit 2; }
[ -e "$state/hosts.env" ] && { echo "$0: $state/hosts.env exists: run 'down' first" >&2; exit 2; }
command -v ip >/dev/null || skip "'ip' (Debian package iproute2) is not installed"
command -v unshare >/dev/null || skip "'unshare' (util-linux) is not installed"

x=$(( $(printf '%s' "$tag" | cksum | cut -d' ' -f1) % 250 + 1 ))
ns_a=olmo2-a-$tag ns_b=olmo2-b-$tag
cat > "$state/hosts.env" <<EOF
NS_A=$ns_a
NS_B=$ns_b
HOST_A=nodea
HOST_B=nodeb
IP_A=10.77.$x.1
IP_B=10.77.$x.2
SUBNET=10.77.$x.0/24
LOCAL=$state/local
DISK_A=$state/disk-nodea
DISK_B=$state/disk-nodeb
EOF
mkdir -p "$state/local" "$state/disk-nodea" "$state/disk-nodeb"

if ! err=$(ip netns add "$ns_a" 2>&1); then
  rm -f "$state/hosts.env"
  skip "'ip netns add' is not permitted here ($err)"
fi
trap down ERR
ip netns add "$ns_b"
if ! err=$(ip netns exec "$ns_a" unshare --uts --mount -- true 2>&1); then
  down
  skip "'unshare --uts --mount' is not permitted here ($err)"
fi
# Each end is created directly in its namespace: no name is ever taken in the root one.
ip link add veth-a netns "$ns_a" type veth peer name veth-b netns "$ns_b"
ip -n "$ns_a" addr add "10.77.$x.1/24" dev veth-a
ip -n "$ns_b" addr add "10.77.$x.2/24" dev veth-b
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set veth-a up
ip -n "$ns_b" link set veth-b up
# The carrier comes up a moment later; wait (at most 10 s) so that callers need not.
for _ in $(seq 100); do
  if ip -n "$ns_a" -br link show veth-a | grep -q ' UP ' &&
     ip -n "$ns_b" -br link show veth-b | grep -q ' UP '; then
    break
  fi
  sleep 0.1
done

# run-on keeps its command's words as they are (exec'd after the set-up). The agent is
# what Open MPI's rsh launcher runs as `agent [options] HOST CMD...`: it may pass
# ssh-like options (-x) first, which are ignored, and the command arrives as words meant
# for a remote shell, so they are joined and given to sh -c, as ssh does.
cat > "$state/run-on" <<EOF
#!/bin/sh
# Generated by scripts/netns_hosts.sh: run-on HOST COMMAND... on a namespace host.
[ \$# -ge 2 ] || { echo "\$0: usage: \$0 HOST COMMAND..." >&2; exit 2; }
host=\$1; shift
case \$host in
  nodea|$ns_a|10.77.$x.1) ns=$ns_a host=nodea disk='$state/disk-nodea' ;;
  nodeb|$ns_b|10.77.$x.2) ns=$ns_b host=nodeb disk='$state/disk-nodeb' ;;
  *) echo "\$0: unknown host '\$host' (this run's hosts: nodea, nodeb)" >&2; exit 2 ;;
esac
exec ip netns exec "\$ns" unshare --uts --mount -- /bin/sh -c \\
  'hostname "\$0" && mount --bind "\$1" "$state/local" && shift && exec "\$@"' "\$host" "\$disk" "\$@"
EOF
cat > "$state/agent" <<EOF
#!/bin/sh
# Generated by scripts/netns_hosts.sh: Open MPI's rsh agent for the namespace hosts.
while [ \$# -gt 0 ]; do
  case \$1 in -*) shift ;; *) break ;; esac
done
[ \$# -ge 2 ] || { echo "\$0: usage: \$0 HOST COMMAND..." >&2; exit 2; }
host=\$1; shift
exec '$state/run-on' "\$host" /bin/sh -c "\$*"
EOF
chmod +x "$state/run-on" "$state/agent"
trap - ERR
echo "hosts nodea ($ns_a, 10.77.$x.1) and nodeb ($ns_b, 10.77.$x.2) are up; state in $state"
