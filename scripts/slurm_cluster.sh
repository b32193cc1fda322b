#!/bin/bash
# A one-node Slurm 22.05 cluster on the loopback address, for the tests of deploy/slurm/
# and deploy/prometheus/slurm/ (docs/architecture.md §9, §12 "Exit status"):
#
#   scripts/slurm_cluster.sh start DIR   # prints SLURM_CONF=DIR/slurm.conf when the node is idle
#   SLURM_CONF=DIR/slurm.conf sbatch ...
#   scripts/slurm_cluster.sh stop DIR    # cancels the jobs, stops every daemon by its PID
#
# Everything lives in DIR: slurm.conf, state, spool, logs, PID files, a munged of its own
# on DIR/munge/munge.socket (AuthInfo=socket=…, so the machine's munge socket is not
# touched), and the Prometheus targets folder DIR/targets that the PrologSlurmctld /
# EpilogSlurmctld hook (deploy/prometheus/slurm/slurmctld_hook.sh, settings in
# DIR/slurmctld_hook.conf) writes. Ports are chosen free, below the kernel's ephemeral
# range (low_ports). The node declares CPUs=8 (SlurmdParameters=config_overrides) so
# that 4 tasks fit a 2-core machine without -O.
# Partition `debug` (the default) is this host's node. Partition `pair` adds a second
# node, <host>-b, served by a second slurmd on this host (slurmd -N): Debian's Slurm is
# not built for several slurmds on one host, so a step (srun) across both fails, but a
# two-node job without steps runs, which is what the prolog's per-node case needs.
# KillWait is Slurm's default, 30 s. Must run as root (SlurmUser=root, munged as munge).
# Exit status: 0 started/stopped; 1 with one line on stderr naming what failed (the daemons
# that did start are stopped again); 77 when slurmctld, slurmd or munged is not installed
# (the tests skip on it).
set -u
cmd=${1:-}; dir=${2:-}
die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }
if [ -z "$cmd" ] || [ -z "$dir" ]; then die "usage: slurm_cluster.sh start|stop DIR"; fi
here=$(cd "$(dirname "$0")/.." && pwd)
export SLURM_CONF=$dir/slurm.conf

pid_of() { [ -s "$1" ] && cat "$1"; }

# Sends SIGTERM to the PID in file $1 and waits up to 10 s, then SIGKILL.
stop_pid() {
  local pid; pid=$(pid_of "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || { rm -f "$1"; return 0; }
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { rm -f "$1"; return 0; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null; rm -f "$1"
}

stop() {
  [ -d "$dir" ] || return 0
  if [ -s "$dir/run/slurmctld.pid" ] && [ -f "$SLURM_CONF" ]; then
    # Jobs first, so that no slurmstepd or task outlives the cluster.
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      timeout 10 scancel --full $jobs 2>/dev/null
      for _ in $(seq 150); do
        [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2
      done
    fi
  fi
  for pidfile in "$dir"/run/slurmd-*.pid; do stop_pid "$pidfile"; done
  stop_pid "$dir/run/slurmctld.pid"
  stop_pid "$dir/munge/munged.pid"
}

# $1 distinct ports that can be bound now, below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range, 32768-60999 by default): slurm.conf must name them
# before the daemons bind them, and the kernel never gives a port below that range to a
# bind to port 0 or to an outgoing connection, so no other test's server (they all bind
# port 0) can take one in between; only the tests that pick low ports themselves could,
# and ctest runs those one at a time (RESOURCE_LOCK slurm_cluster). From 30000 on,
# clear of port:auto (20000 + job id mod 10000) of the cluster's own jobs; above the
# range instead where it starts too low.
low_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split()[:2])
except (OSError, ValueError):
    lo, hi = 32768, 60999
first, last = (30000, lo - 1) if lo > 30100 else (20000, lo - 1) if lo > 20100 else (hi + 1, 65535)
held = []
for _ in range(1000):
    if len(held) == n or first > last:
        break
    s = socket.socket()
    try:  # every address, no SO_REUSEADDR: in use anywhere (or in TIME_WAIT) fails
        s.bind(("0.0.0.0", random.randint(first, last)))
        held.append(s)
    except OSError:
        s.close()
if len(held) < n:
    sys.exit(f"no {n} free ports in {first}-{last}")
print(" ".join(str(s.getsockname()[1]) for s in held))
EOF
}

start() {
  for tool in munged slurmctld slurmd sbatch srun scontrol; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
      echo "slurm_cluster.sh: $tool is not installed (Debian: munge slurmctld slurmd slurm-client)" >&2; exit 77; }
  done
  [ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root, munged runs as the munge user)"
  [ -r /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (Debian's munge package makes it)"
  mkdir -p "$dir"/{run,log,state,spool,targets} || die "cannot create folders in $dir"
  dir=$(cd "$dir" && pwd); export SLURM_CONF=$dir/slurm.conf
  chmod 755 "$dir"

  # munged refuses a socket folder others may write; it runs as munge and owns it.
  install -d -o munge -g munge -m 755 "$dir/munge" || die "cannot create $dir/munge"
  runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || { stop; die "munged did not start: $(tail -3 "$dir/munge/munged.log" 2>/dev/null)"; }
  munge -S "$dir/munge/munge.socket" -n | unmunge -S "$dir/munge/munge.socket" >/dev/null ||
    { stop; die "munge -n | unmunge fails on $dir/munge/munge.socket"; }

  local host mem ctld_port slurmd_port second_port
  host=$(hostname -s)
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  [ -n "$mem" ] || { stop; die "slurmd -C reports no RealMemory"; }
  read -r ctld_port slurmd_port second_port < <(low_ports 3)
  [ -n "$second_port" ] || { stop; die "no free ports below the ephemeral range for slurmctld and slurmd"; }

  # The hook finds its settings in slurmctld_hook.conf next to the path slurm.conf names.
  ln -sf "$here/deploy/prometheus/slurm/slurmctld_hook.sh" "$dir/slurmctld_hook.sh"
  cat > "$dir/slurmctld_hook.conf" <<EOF
SLURM_CONF=$SLURM_CONF
OLMO2_PROMETHEUS_TARGETS=$dir/targets
EOF
  # pmix's per-step folders inside DIR, not /tmp: another test cluster on this machine
  # numbers its jobs from 1 too, and both would use /tmp/spmix_appdir_<uid>_<job>.<step>.
  mkdir -p "$dir/pmix"
  echo "PMIxCliTmpDirBase=$dir/pmix" > "$dir/mpi.conf"
  cat > "$SLURM_CONF" <<EOF
ClusterName=olmo2test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# A pending job whose submit-time scheduling pass was skipped waits for the periodic
# pass (60 s by default, backfill 30 s): every 2 s here, so tests do not stall.
SchedulerParameters=sched_interval=2,bf_interval=2
SlurmdParameters=config_overrides
PrologSlurmctld=$dir/slurmctld_hook.sh
EpilogSlurmctld=$dir/slurmctld_hook.sh
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=$mem State=UNKNOWN
NodeName=$host-b NodeHostname=$host NodeAddr=127.0.0.1 Port=$second_port CPUs=8 RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=pair Nodes=$host,$host-b MaxTime=INFINITE State=UP
EOF
  /usr/sbin/slurmctld -i -f "$SLURM_CONF" || { stop; die "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.log")"; }
  for node in "$host" "$host-b"; do
    /usr/sbin/slurmd -f "$SLURM_CONF" -N "$node" ||
      { stop; die "slurmd -N $node did not start: $(tail -3 "$dir/log/slurmd-$node.log")"; }
  done
  for _ in $(seq 150); do
    state=$(sinfo -h -N -n "$host,$host-b" -o %t 2>/dev/null | sort -u | paste -sd, -)
    case "$state" in idle) echo "SLURM_CONF=$SLURM_CONF"; return 0 ;; esac
    sleep 0.2
  done
  stop; die "nodes $host, $host-b not idle after 30 s (states '${state:-none}'); logs in $dir/log"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "usage: slurm_cluster.sh start|stop DIR (not '$cmd')" ;;
esac
