"""A two-node Slurm 22.05 cluster on the namespace hosts of netns_hosts.py
(docs/architecture.md §10 "Two hosts"). Python 3 standard library only.

    with SlurmOnHosts(hosts, state_dir) as slurm:     # raises Skip without Slurm or munge
        proc, job = slurm.sbatch(["--nodes=2", script])
        status = slurm.wait(proc, job, timeout=120)

Everything is this run's own: a munged on its own socket (slurm.conf's AuthInfo=socket=…,
so the machine's munge socket and other tests' clusters are not touched; the key is
/etc/munge/munge.key), slurm.conf, state, spool, logs and PID files under state_dir.
slurmctld runs in nodea's network namespace as host nodea; one slurmd per host in that
host's network namespace (entered with nsenter: `ip netns exec` remounts /sys, and slurmd
then finds no /sys/fs/cgroup), with the host's UTS name and its "local disk" mount, like
the rsh agent's ranks. Each node declares CPUs=8 (SlurmdParameters=config_overrides), so
that 2 tasks per node fit without -O. The daemons run in the foreground as children of
this process and are stopped by PID (jobs first, with scancel).
"""
import os
import shutil
import signal
import subprocess
import time

from netns_hosts import HOSTS, Skip

SBIN = "/usr/sbin"


def _tool(name):
    return shutil.which(name) or (os.path.join(SBIN, name) if os.access(os.path.join(SBIN, name), os.X_OK) else None)


class SlurmOnHosts:
    """Context manager: munged, slurmctld and a slurmd per host on entry (both nodes idle);
    jobs cancelled and every daemon stopped by PID on exit."""

    def __init__(self, hosts, state_dir):
        self.hosts = hosts
        self.dir = os.path.abspath(state_dir)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.procs = []  # (name, Popen) in start order

    def _netns(self, host):
        ns = self.hosts.env["NS_A" if host == "nodea" else "NS_B"]
        return ["nsenter", f"--net=/run/netns/{ns}"]

    def client(self, args):
        """A Slurm client command (a list) as run on nodea, with this cluster's slurm.conf."""
        return self._netns("nodea") + ["env", f"SLURM_CONF={self.conf}"] + list(args)

    def _start(self, name, cmd):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        self.procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
        log.close()

    @staticmethod
    def check_tools():
        """{tool: path} of what the cluster needs; raises Skip naming what is missing."""
        tools = {t: _tool(t) for t in ("munged", "munge", "slurmctld", "slurmd", "sbatch", "sinfo", "nsenter")}
        missing = [t for t, p in tools.items() if p is None]
        if missing:
            raise Skip(f"{', '.join(missing)} not installed (Debian packages munge slurmctld slurmd slurm-client)")
        if not os.access("/etc/munge/munge.key", os.R_OK):
            raise Skip("/etc/munge/munge.key is not readable (Debian's munge package makes it)")
        return tools

    def __enter__(self):
        tools = self.check_tools()
        for sub in ["log", "run", "state"] + [os.path.join("spool", h) for h in HOSTS]:
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        # The pmix plugin's per-step folders (spmix_appdir_UID_JOB.STEP) go to each
        # host's own disk: on a shared /tmp the two nodes' step 0 would collide.
        for h in HOSTS:
            os.makedirs(os.path.join(self.hosts.disk[h], "pmix"), exist_ok=True)
        os.chmod(self.dir, 0o755)
        munge_dir = os.path.join(self.dir, "munge")
        # munged refuses a socket folder that others may write to; it runs as munge.
        subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "755", munge_dir], check=True)
        try:
            self._up(tools, munge_dir)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _up(self, tools, munge_dir):
        socket = os.path.join(munge_dir, "munge.socket")
        self._start("munged", ["runuser", "-u", "munge", "--", tools["munged"], "--foreground",
                               f"--socket={socket}", f"--pid-file={munge_dir}/munged.pid",
                               f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"])
        self._wait("munged to answer", lambda: subprocess.run(
            [tools["munge"], "-S", socket, "-n"], capture_output=True).returncode == 0, 15)
        mem = subprocess.run([tools["slurmd"], "-C"], capture_output=True, text=True).stdout
        mem = int(mem.split("RealMemory=")[1].split()[0])
        d, ip = self.dir, self.hosts.ip
        nodes = "\n".join(f"NodeName={h} NodeAddr={ip[h]} CPUs=8 RealMemory={mem} State=UNKNOWN" for h in HOSTS)
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(f"""ClusterName=olmo2two
SlurmctldHost=nodea({ip['nodea']})
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
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
SlurmdParameters=config_overrides
{nodes}
PartitionName=debug Nodes={','.join(HOSTS)} Default=YES MaxTime=INFINITE State=UP
""")
        with open(os.path.join(self.dir, "mpi.conf"), "w", encoding="utf-8") as f:
            f.write(f"PMIxCliTmpDirBase={self.hosts.local}/pmix\n")
        # slurmctld checks that its host name is SlurmctldHost's.
        self._start("slurmctld", self._netns("nodea") + [
            "unshare", "--uts", "--", "/bin/sh", "-c", 'hostname nodea && exec "$@"', "sh",
            tools["slurmctld"], "-D", "-i", "-f", self.conf])
        for host in HOSTS:
            self._start(f"slurmd-{host}", self._netns(host) + [
                "unshare", "--uts", "--mount", "--", "/bin/sh", "-c",
                'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"', "sh",
                host, self.hosts.disk[host], self.hosts.local, tools["slurmd"], "-D", "-f", self.conf])

        def idle():
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {p.returncode}:\n{self.log_tail(name + '.out')}")
            r = subprocess.run(self.client(["sinfo", "-h", "-N", "-o", "%N %t"]), capture_output=True, text=True)
            states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
            return all(states.get(h) == "idle" for h in HOSTS)
        self._wait("both Slurm nodes to be idle", idle, 30)

    @staticmethod
    def _wait(what, check, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}")

    def log_tail(self, name, chars=2000):
        try:
            with open(os.path.join(self.dir, "log", name), encoding="utf-8", errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def sbatch(self, args):
        """Starts `sbatch --wait ARGS…` on nodea; returns (its Popen, the job id). Its exit
        status, once the job ends, is the job's (srun's: the largest of the tasks')."""
        proc = subprocess.Popen(self.client(["sbatch", "--wait"] + list(args)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        line = proc.stdout.readline()  # "Submitted batch job N", printed at once
        if not line.startswith("Submitted batch job "):
            proc.wait()
            raise RuntimeError(f"sbatch exited with {proc.returncode}: {line}{proc.stdout.read()}")
        return proc, line.split()[-1]

    def wait(self, proc, job_id, timeout):
        """The status of an sbatch from sbatch(); on timeout the job is cancelled and the
        status is "timeout"."""
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.scancel(job_id, "--full", "--signal=KILL")
            proc.wait()
            return "timeout"

    def scancel(self, job_id, *options):
        """scancel OPTIONS… JOB_ID on nodea (no options: SIGTERM to every process of the job,
        then SIGKILL after KillWait, 30 s — what a pre-emption does)."""
        subprocess.run(self.client(["scancel"] + list(options) + [job_id]), check=True, timeout=20)

    def __exit__(self, *exc):
        running = {name for name, p in self.procs if p.poll() is None}
        if "slurmctld" in running:
            subprocess.run(self.client(["scancel", "--full", "--partition", "debug"]), capture_output=True, timeout=20)
            deadline = time.time() + 30
            while time.time() < deadline:
                r = subprocess.run(self.client(["squeue", "-h", "-o", "%i"]), capture_output=True, text=True,
                                   timeout=20)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.2)
        for name, p in reversed(self.procs):  # slurmds, then slurmctld, then munged
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return False
