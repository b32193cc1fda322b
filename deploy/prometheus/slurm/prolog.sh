#!/bin/sh
# Slurm PrologSlurmctld for olmo2 jobs: writes a Prometheus file_sd targets file naming
# the job's metrics endpoint, which prometheus.yml picks up within its refresh_interval.
# epilog.sh (EpilogSlurmctld) removes it. In slurm.conf, on the host Prometheus reads
# the targets folder from:
#   PrologSlurmctld=/path/to/olmo2/deploy/prometheus/slurm/prolog.sh
#   EpilogSlurmctld=/path/to/olmo2/deploy/prometheus/slurm/epilog.sh
#
# Jobs whose name matches OLMO2_SLURM_JOB_NAMES (a shell pattern, default 'olmo2*') get a
# file; names containing 'serve' are olmo2-serve jobs (port 8000), the others olmo2-train
# jobs (port 9400, rank 0's --metrics-port, on the allocation's first node). Run them
# with --metrics-host 0.0.0.0 (or the node's address): the default 127.0.0.1 cannot be
# scraped from another host. Settings (environment):
#   OLMO2_PROMETHEUS_TARGETS  folder of targets files (default: ../targets next to this script)
#   OLMO2_SLURM_JOB_NAMES     which jobs to register (default 'olmo2*'; '*' for all)
#   OLMO2_METRICS_JOB         olmo2-train | olmo2-serve (default: from the job name)
#   OLMO2_METRICS_PORT        the port (default 9400 for olmo2-train, 8000 for olmo2-serve)
#   OLMO2_METRICS_PER_NODE=1  one target per node (the exporter's one-endpoint-per-node option)
# A prolog that fails holds the job, so this one reports problems on stderr and exits 0.
PATH=/usr/local/bin:/usr/bin:/bin:$PATH
set -u

fail() { echo "olmo2 prolog: $*" >&2; exit 0; }

[ -n "${SLURM_JOB_ID:-}" ] || fail "SLURM_JOB_ID is not set (run by slurmctld as PrologSlurmctld)"
case "${SLURM_JOB_NAME:-}" in
  ${OLMO2_SLURM_JOB_NAMES:-olmo2*}) ;;
  *) exit 0 ;;
esac
[ -n "${SLURM_JOB_NODELIST:-}" ] || fail "job $SLURM_JOB_ID: SLURM_JOB_NODELIST is not set"

dir=${OLMO2_PROMETHEUS_TARGETS:-$(dirname "$0")/../targets}
case "$SLURM_JOB_NAME" in
  *serve*) job=${OLMO2_METRICS_JOB:-olmo2-serve} ;;
  *)       job=${OLMO2_METRICS_JOB:-olmo2-train} ;;
esac
case "$job" in
  olmo2-train) port=${OLMO2_METRICS_PORT:-9400} ;;
  olmo2-serve) port=${OLMO2_METRICS_PORT:-8000} ;;
  *) fail "OLMO2_METRICS_JOB must be olmo2-train or olmo2-serve, not '$job'" ;;
esac
case "$port" in ''|*[!0-9]*) fail "OLMO2_METRICS_PORT '$port' is not a port number" ;; esac

# node[01-03],gpu7 -> one host name a line (scontrol only for bracketed ranges).
case "$SLURM_JOB_NODELIST" in
  *[[]*) hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST") ||
           fail "job $SLURM_JOB_ID: scontrol cannot expand '$SLURM_JOB_NODELIST'" ;;
  *) hosts=$(echo "$SLURM_JOB_NODELIST" | tr ',' '\n') ;;
esac
[ "${OLMO2_METRICS_PER_NODE:-0}" = 1 ] || hosts=$(echo "$hosts" | head -n 1)

# Label values: keep them to a safe alphabet so the JSON needs no escaping.
clean() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }
targets=$(echo "$hosts" | sed '/^$/d; s/.*/"&:'"$port"'"/' | paste -sd, -)
[ -n "$targets" ] || fail "job $SLURM_JOB_ID: no host in '$SLURM_JOB_NODELIST'"

mkdir -p "$dir" || fail "cannot create $dir"
tmp=$(mktemp "$dir/.olmo2-XXXXXX") || fail "cannot write in $dir"
cat > "$tmp" <<JSON
[
  {
    "targets": [$targets],
    "labels": {
      "slurm_job_id": "$(clean "$SLURM_JOB_ID")",
      "slurm_job_name": "$(clean "$SLURM_JOB_NAME")",
      "slurm_user": "$(clean "${SLURM_JOB_USER:-unknown}")"
    }
  }
]
JSON
chmod 644 "$tmp"
# Prometheus watches the folder: rename so it never reads a half-written file.
mv -f "$tmp" "$dir/$job-$SLURM_JOB_ID.json" || { rm -f "$tmp"; fail "cannot rename into $dir"; }
exit 0
