#!/bin/sh
# Slurm EpilogSlurmctld for olmo2 jobs: removes the targets file prolog.sh wrote, so that
# Prometheus stops scraping (and Olmo2TargetDown stays quiet for) a finished job.
# Same OLMO2_PROMETHEUS_TARGETS setting as prolog.sh; slurmctld_hook.sh execs it as
# EpilogSlurmctld. Always exits 0.
PATH=/usr/local/bin:/usr/bin:/bin:$PATH
set -u
[ -n "${SLURM_JOB_ID:-}" ] || { echo "olmo2 epilog: SLURM_JOB_ID is not set" >&2; exit 0; }
case "$SLURM_JOB_ID" in *[!0-9_]*) echo "olmo2 epilog: odd SLURM_JOB_ID '$SLURM_JOB_ID'" >&2; exit 0 ;; esac
dir=${OLMO2_PROMETHEUS_TARGETS:-$(dirname "$0")/../targets}
rm -f "$dir/olmo2-train-$SLURM_JOB_ID.json" "$dir/olmo2-serve-$SLURM_JOB_ID.json"
exit 0
