#!/bin/sh
# The program slurm.conf names as both PrologSlurmctld and EpilogSlurmctld:
#   PrologSlurmctld=/etc/slurm/olmo2_hook.sh
#   EpilogSlurmctld=/etc/slurm/olmo2_hook.sh
# where /etc/slurm/olmo2_hook.sh is this file or a symbolic link to it. slurmctld runs
# it with an almost empty environment (SLURM_JOB_* and SLURM_SCRIPT_CONTEXT, but no PATH
# and no SLURM_CONF), so it sets what prolog.sh and epilog.sh need, then execs the one
# SLURM_SCRIPT_CONTEXT names (prolog_slurmctld or epilog_slurmctld).
#
# EDIT: the settings below, or put them in a file named like the path slurm.conf gives
# with .sh replaced by .conf (/etc/slurm/olmo2_hook.conf above), lines NAME=VALUE:
#   SLURM_CONF                the cluster's slurm.conf, for scontrol (an inherited value wins)
#   OLMO2_PROMETHEUS_TARGETS  the folder prometheus.yml's file_sd_configs read
# Always exits 0: a failing PrologSlurmctld would hold the job.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
inherited_conf=${SLURM_CONF:-}
settings=${0%.sh}.conf
if [ -f "$settings" ]; then
  # shellcheck disable=SC1090
  . "$settings" || echo "olmo2 slurmctld hook: cannot read $settings" >&2
fi
[ -n "$inherited_conf" ] && SLURM_CONF=$inherited_conf
SLURM_CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
# The folder Prometheus reads; this default is ../targets beside prolog.sh.
OLMO2_PROMETHEUS_TARGETS=${OLMO2_PROMETHEUS_TARGETS:-}
export SLURM_CONF
[ -n "$OLMO2_PROMETHEUS_TARGETS" ] && export OLMO2_PROMETHEUS_TARGETS

here=$(dirname "$(readlink -f "$0")")
case "${SLURM_SCRIPT_CONTEXT:-}" in
  prolog_slurmctld) exec "$here/prolog.sh" ;;
  epilog_slurmctld) exec "$here/epilog.sh" ;;
  *) echo "olmo2 slurmctld hook: SLURM_SCRIPT_CONTEXT is '${SLURM_SCRIPT_CONTEXT:-}'," \
          "expected prolog_slurmctld or epilog_slurmctld (set by Slurm 21.08 and later)" >&2
     exit 0 ;;
esac
