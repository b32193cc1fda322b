"""Two namespace hosts for the multi-node tests (docs/architecture.md §10 "Two hosts"),
made and deleted by scripts/netns_hosts.sh. Python 3 standard library only.

    with NetnsHosts(script, state_dir) as hosts:      # raises Skip when not permitted
        cmd = hosts.mpirun(mpiexec, ranks_per_host=2) + [olmo2, "train", ...]

Every host sees the whole file system except hosts.local, where each sees its own
directory (hosts.disk["nodea"], hosts.disk["nodeb"]). mpirun runs in nodea's network
namespace (under the machine's own host name, so that it starts no rank itself) and
starts the ranks of both hosts through the script's rsh agent.
"""
import os
import subprocess

SKIP_STATUS = 77  # what the script and the tests return for "skipped" (ctest SKIP_RETURN_CODE)
HOSTS = ("nodea", "nodeb")


class Skip(Exception):
    """The namespaces cannot be made here; the message says why (one line)."""


class NetnsHosts:
    """Context manager: `up` on entry, `down` (kills what still runs there, by PID, then
    deletes the namespaces) on exit, whatever happened in between."""

    def __init__(self, script, state_dir, tag=None):
        self.script = script
        self.state = os.path.abspath(state_dir)
        self.tag = str(tag if tag is not None else os.getpid())
        self.env = {}

    def __enter__(self):
        os.makedirs(self.state, exist_ok=True)
        r = subprocess.run([self.script, "up", self.state, self.tag], capture_output=True, text=True)
        if r.returncode == SKIP_STATUS:
            line = (r.stderr.strip().splitlines() or ["netns_hosts.sh skipped"])[-1]
            raise Skip(line.removeprefix("SKIP: "))
        if r.returncode != 0:
            raise RuntimeError(f"{self.script} up exited with status {r.returncode}: {r.stderr.strip()}")
        with open(os.path.join(self.state, "hosts.env"), encoding="utf-8") as f:
            self.env = dict(line.strip().split("=", 1) for line in f if "=" in line)
        return self

    def __exit__(self, *exc):
        r = subprocess.run([self.script, "down", self.state], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{self.script} down exited with status {r.returncode}: {r.stderr.strip()}")
        return False

    @property
    def ip(self):
        """{host name: its address}."""
        return {"nodea": self.env["IP_A"], "nodeb": self.env["IP_B"]}

    @property
    def local(self):
        """The path that shows each host its own directory."""
        return self.env["LOCAL"]

    @property
    def disk(self):
        """{host name: the directory it sees at `local`} (as seen from outside)."""
        return {"nodea": self.env["DISK_A"], "nodeb": self.env["DISK_B"]}

    def in_host_a_network(self, cmd):
        """cmd (a list) run in nodea's network namespace, as the machine's own host."""
        return ["ip", "netns", "exec", self.env["NS_A"]] + list(cmd)

    def run_on(self, host, cmd):
        """cmd (a list) run on `host` as that host: its namespace, host name and disk."""
        return [os.path.join(self.state, "run-on"), host] + list(cmd)

    def mpirun(self, mpiexec, ranks_per_host):
        """The mpirun command line (a list) that places ranks_per_host ranks on nodea then
        as many on nodeb (ranks 0.. on nodea), all Open MPI traffic on the veth subnet."""
        subnet = self.env["SUBNET"]
        hosts = ",".join(f"{h}:{ranks_per_host}" for h in HOSTS)
        return self.in_host_a_network([
            mpiexec, "--allow-run-as-root", "--oversubscribe", "--host", hosts,
            "--mca", "plm_rsh_agent", os.path.join(self.state, "agent"),
            "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
            "--mca", "btl", "self,vader,tcp"])
