"""A throw-away single-node Slurm on this machine, for tests/workflow/test_slurm.py (and by hand).

Writes /etc/slurm/slurm.conf (node name from `hostname -s`, CPUs and memory from
`slurmd -C`, accounting off), starts munged, slurmctld and slurmd as root, waits (bounded)
until the node is idle, and on stop cancels its jobs and ends exactly the PIDs it started.
Every state, pid and log file lives in one run directory, so nothing stale carries over.

By hand (as root, after `apt-get install -y slurm-wlm munge`):
    python tests/local_slurm.py up /tmp/slurm-run     # prints the node name, leaves it running
    python tests/local_slurm.py down /tmp/slurm-run   # stops the PIDs recorded by `up`
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# written by kvspec tests/local_slurm.py"
LOCK = Path("/run/kvspec-local-slurm.lock")
BINARIES = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel"]


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be brought up here (not root, not installed, or a daemon failed)."""


def run(cmd: list[str], timeout: float = 20) -> subprocess.CompletedProcess:
    """Run a short command with a hard timeout (a hung Slurm client must not hang the tests)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {err.timeout}s")


def missing_requirements() -> str | None:
    """Why a local Slurm cannot start here, or None when it can be tried."""
    if os.geteuid() != 0:
        return "not root (slurmctld/slurmd/munged must start as root)"
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install -y slurm-wlm munge)"
    if CONF.exists() and MARKER not in CONF.read_text():
        return f"{CONF} belongs to a real Slurm installation; not overwriting it"
    return None


def node_resources() -> tuple[str, int, int]:
    """(node name, CPUs, RealMemory MB) of this machine as slurmd reports them."""
    out = run(["slurmd", "-C"]).stdout
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    cpus, mem = int(fields.get("CPUs", os.cpu_count() or 1)), int(fields.get("RealMemory", 1000))
    return socket.gethostname().split(".")[0], cpus, mem


def slurm_conf(run_dir: Path, node: str, cpus: int, mem_mb: int) -> str:
    """A minimal slurm.conf: one node on 127.0.0.1, partition `debug`, no accounting."""
    return f"""{MARKER}
ClusterName=local
SlurmctldHost={node}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
StateSaveLocation={run_dir}/ctld
SlurmdSpoolDir={run_dir}/d
SlurmctldPidFile={run_dir}/slurmctld.pid
SlurmdPidFile={run_dir}/slurmd.pid
SlurmctldLogFile={run_dir}/slurmctld.log
SlurmdLogFile={run_dir}/slurmd.log
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def munge_works() -> bool:
    """True when a munged answers on the default socket (credential round trip)."""
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, check=True).stdout
        return (
            subprocess.run(["unmunge"], input=cred, capture_output=True, timeout=5).returncode == 0
        )
    except (subprocess.SubprocessError, OSError):
        return False


class LocalSlurm:
    """Context manager: a running single-node Slurm; `node` is its node name."""

    def __init__(self, run_dir: Path, lock_timeout: float = 300, ready_timeout: float = 60):
        self.run_dir = Path(run_dir)
        self.lock_timeout, self.ready_timeout = lock_timeout, ready_timeout
        self.pids: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.node = ""
        self._lock = None

    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _acquire_lock(self) -> None:
        """Only one local Slurm at a time on this machine (ports 6817/6818, one slurm.conf)."""
        self._lock = open(LOCK, "w")  # noqa: SIM115 (held until stop)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SlurmUnavailable("another local Slurm kept the lock") from None
                time.sleep(2)

    def start(self) -> None:
        why = missing_requirements()
        if why:
            raise SlurmUnavailable(why)
        self._acquire_lock()
        for sub in ("ctld", "d"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.node, cpus, mem = node_resources()
        CONF.parent.mkdir(parents=True, exist_ok=True)
        CONF.write_text(slurm_conf(self.run_dir, self.node, cpus, mem))
        self._start_munge()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self._spawn("slurmd", ["slurmd", "-D"])
        self._wait_idle()

    def _start_munge(self) -> None:
        if munge_works():  # a munged is already serving: use it, do not own it
            return
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        self._spawn("munged", ["munged", "--foreground"], user="munge")
        deadline = time.monotonic() + 15
        while not munge_works():
            if time.monotonic() > deadline or self._died("munged"):
                raise SlurmUnavailable("munged did not start: " + self._log_tail("munged"))
            time.sleep(0.5)

    def _spawn(self, name: str, cmd: list[str], user: str | None = None) -> None:
        log = open(self.run_dir / f"{name}.out", "w")  # noqa: SIM115 (child keeps it)
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, user=user, start_new_session=True
        )
        self.pids[name], self.procs[name] = proc.pid, proc
        (self.run_dir / "pids.json").write_text(json.dumps(self.pids))

    def _died(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is not None

    def _log_tail(self, name: str) -> str:
        text = ""
        for suffix in (".out", ".log"):
            f = self.run_dir / f"{name}{suffix}"
            text += f.read_text(errors="replace")[-1500:] if f.exists() else ""
        return text

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        state = ""
        while time.monotonic() < deadline:
            for name in ("slurmctld", "slurmd"):
                if self._died(name):
                    raise SlurmUnavailable(f"{name} exited: {self._log_tail(name)}")
            state = run(["sinfo", "-h", "-N", "-o", "%t"], timeout=10).stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return
            time.sleep(1)
        raise SlurmUnavailable(f"node not idle after {self.ready_timeout}s (state {state!r})")

    def stop(self) -> None:
        """Cancel this cluster's jobs, end the PIDs started here, remove the config."""
        if self.pids.get("slurmctld"):
            run(["scancel", "--full", "--user", "root"], timeout=15)
            time.sleep(1)
        stop_pids(self.pids)
        self.pids, self.procs = {}, {}
        if CONF.exists() and MARKER in CONF.read_text():
            CONF.unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def stop_pids(pids: dict[str, int], grace: float = 10) -> None:
    """SIGTERM each recorded PID (slurmd first, munged last), SIGKILL after `grace` seconds."""
    for name in ("slurmd", "slurmctld", "munged"):
        pid = pids.get(name)
        if not pid:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            _alive(pid)


def _alive(pid: int) -> bool:
    """True while `pid` runs; reaps it when it is our exited child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(") ")[-1].startswith("Z"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print(__doc__)
        return 2
    run_dir = Path(argv[1])
    if argv[0] == "down":
        stop_pids(json.loads((run_dir / "pids.json").read_text()))
        if CONF.exists() and MARKER in CONF.read_text():
            CONF.unlink()
        return 0
    cluster = LocalSlurm(run_dir)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    print(f"node {cluster.node} idle; pids {cluster.pids}; stop with: down {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
