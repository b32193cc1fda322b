#!/bin/sh
# Slurm PrologSlurmctld for olmo2 jobs: writes a Prometheus file_sd targets file naming
# the job's metrics endpoints, which prometheus.yml picks up within its refresh_interval;
# epilog.sh (EpilogSlurmctld) removes it. slurm.conf names slurmctld_hook.sh, which sets
# PATH, SLURM_CONF and OLMO2_PROMETHEUS_TARGETS and execs this file (see that file).
#
# The job says what to register, in its comment (sbatch --comment), one word of it:
#   olmo2-metrics=port:9411                 a training job, rank 0's --metrics-port
#   olmo2-metrics=port:9411,per-node        --metrics-per-node: one target per node
#   olmo2-metrics=kind:serve,port:8123      olmo2 serve (metrics on its HTTP port, rank 0)
# Keys: port:N (1-65535) or port:auto (20000 + job id mod 10000; required), kind:train|serve
# (default train), per-node. A job
# without such a word is left alone. The targets are node:port for the allocation's
# first node (rank 0 under srun -m block and under mpirun), or for every node with
# per-node; run olmo2 with --metrics-host 0.0.0.0 (train) or --host 0.0.0.0 (serve), as
# deploy/slurm/ does, since 127.0.0.1 cannot be scraped from another host. The comment
# comes from SLURM_JOB_COMMENT (set for PrologSlurmctld), else from
# `scontrol show job -o $SLURM_JOB_ID`.
# Settings: OLMO2_PROMETHEUS_TARGETS, the folder of targets files (default ../targets
# beside this script). A prolog that fails holds the job, so this one reports problems on
# stderr (slurmctld's log) and exits 0.
PATH=/usr/local/bin:/usr/bin:/bin:$PATH
set -u

fail() { echo "olmo2 prolog: $*" >&2; exit 0; }

[ -n "${SLURM_JOB_ID:-}" ] || fail "SLURM_JOB_ID is not set (run by slurmctld as PrologSlurmctld)"
case "$SLURM_JOB_ID" in *[!0-9_]*) fail "odd SLURM_JOB_ID '$SLURM_JOB_ID'" ;; esac
if [ -n "${SLURM_JOB_COMMENT+set}" ]; then
  comment=$SLURM_JOB_COMMENT
else
  comment=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) ||
    fail "job $SLURM_JOB_ID: no SLURM_JOB_COMMENT, and scontrol show job fails"
fi
# A word of the comment (scontrol prints it as Comment=WORD ...).
spec=$(printf '%s\n' "$comment" | tr ' ' '\n' | sed -n 's/^\(Comment=\)\{0,1\}olmo2-metrics=//p' | head -n 1)
[ -n "$spec" ] || exit 0
[ -n "${SLURM_JOB_NODELIST:-}" ] || fail "job $SLURM_JOB_ID: SLURM_JOB_NODELIST is not set"

kind=train port='' per_node=0
for item in $(printf '%s' "$spec" | tr ',' ' '); do
  case "$item" in
    port:*) port=${item#port:} ;;
    kind:train|kind:serve) kind=${item#kind:} ;;
    per-node) per_node=1 ;;
    *) fail "job $SLURM_JOB_ID: comment 'olmo2-metrics=$spec': unknown item '$item'" \
            "(port:N, kind:train|serve, per-node)" ;;
  esac
done
# port:auto: the port the deploy/slurm/ scripts compute from the job id as well.
[ "$port" = auto ] && port=$((20000 + ${SLURM_JOB_ID%%_*} % 10000))
case "$port" in
  ''|*[!0-9]*) fail "job $SLURM_JOB_ID: comment 'olmo2-metrics=$spec': port '$port' is not a port number" ;;
esac
if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  fail "job $SLURM_JOB_ID: comment 'olmo2-metrics=$spec': port $port is outside 1-65535"
fi
job=olmo2-$kind

# node[01-03],gpu7 -> one host name a line (scontrol only for bracketed ranges).
case "$SLURM_JOB_NODELIST" in
  *[[]*) hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST") ||
           fail "job $SLURM_JOB_ID: scontrol cannot expand '$SLURM_JOB_NODELIST'" ;;
  *) hosts=$(echo "$SLURM_JOB_NODELIST" | tr ',' '\n') ;;
esac
[ "$per_node" = 1 ] || hosts=$(echo "$hosts" | head -n 1)

# Label values: keep them to a safe alphabet so the JSON needs no escaping.
clean() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }
targets=$(echo "$hosts" | sed '/^$/d; s/.*/"&:'"$port"'"/' | paste -sd, -)
[ -n "$targets" ] || fail "job $SLURM_JOB_ID: no host in '$SLURM_JOB_NODELIST'"

dir=${OLMO2_PROMETHEUS_TARGETS:-$(dirname "$0")/../targets}
mkdir -p "$dir" || fail "cannot create $dir"
tmp=$(mktemp "$dir/.olmo2-XXXXXX") || fail "cannot write in $dir"
cat > "$tmp" <<JSON
[
  {
    "targets": [$targets],
    "labels": {
      "slurm_job_id": "$(clean "$SLURM_JOB_ID")",
      "slurm_job_name": "$(clean "${SLURM_JOB_NAME:-}")",
      "slurm_user": "$(clean "${SLURM_JOB_USER:-unknown}")"
    }
  }
]
JSON
chmod 644 "$tmp"
# Prometheus watches the folder: rename so it never reads a half-written file.
mv -f "$tmp" "$dir/$job-$SLURM_JOB_ID.json" || { rm -f "$tmp"; fail "cannot rename into $dir"; }
exit 0
