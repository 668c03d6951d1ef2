"""A private single-node Slurm cluster for tests, with all state in one temp dir.

``slurm_cluster()`` writes a ``slurm.conf`` for one node named ``localhost``
(the machine's CPUs and memory as ``slurmd -C`` reports them), picks two free
ports on 127.0.0.1, starts ``slurmctld -D`` and ``slurmd -D`` (and ``munged``
when munge is needed) as our own child processes, waits until ``sinfo`` shows
the node idle, and yields a :class:`SlurmCluster` whose ``env`` points the
client commands (``sbatch``, ``squeue``, ``scontrol``, ``scancel``) at it
through ``SLURM_CONF``. On exit it cancels every job, stops the daemons by PID
(SIGTERM, then SIGKILL), kills anything still carrying the cluster's marker in
its environment (``slurmstepd`` and job processes are re-parented away from
``slurmd``), and removes the directory.

Authentication: Slurm 22.05 (Debian bookworm) still ships ``auth/none`` and
``cred/none``, so by default no munge daemon is needed. Newer Slurm removed
them (23.11); ``auth="munge"`` (chosen automatically when the ``auth_none``
plugin is absent) starts a private ``munged`` with a generated key and its own
socket, passed to Slurm with ``AuthInfo=socket=…``.

Nothing here needs systemd or cgroups: ``proctrack/linuxproc``,
``task/none``, ``jobacct_gather/none``, no accounting database. The daemons
run as root (``slurmd`` must, to start jobs); :func:`missing_prerequisites`
says why a cluster cannot start here, for a skip message.

Run by hand: ``python tests/slurm_cluster.py`` starts one, prints the
``SLURM_CONF`` to export, and waits for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from waiting import WaitTimeout, poll_until

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
NODE = "localhost"
PARTITION = "debug"
MARKER = "HOPPER_SLURM_CLUSTER"  # set in every daemon's (and so every job's) environment

PLUGIN_DIRS = (
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib/aarch64-linux-gnu/slurm-wlm",
    "/usr/lib/*/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
    "/usr/local/lib/slurm",
)

# Every variable the Slurm clients read from the environment that could point
# them somewhere else (an outer allocation, a user's defaults).
_CLIENT_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SQUEUE_", "SALLOC_", "SRUN_", "SCANCEL_", "SINFO_")


class SlurmClusterError(RuntimeError):
    """The cluster could not be started; the message carries the daemons' log tails."""


def missing_prerequisites(auth: str = "auto") -> str | None:
    """Why a private cluster cannot run here, or None if it can."""
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b) is None]
    if _choose_auth(auth) == "munge" and shutil.which("munged") is None:
        missing.append("munged")
    if missing:
        return (
            f"Slurm is not installed (missing {', '.join(missing)}): "
            "apt-get install -y slurmctld slurmd slurm-client munge"
        )
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; run the Slurm tests as root"
    return None


def _plugin_available(name: str) -> bool:
    for pattern in PLUGIN_DIRS:
        for folder in glob.glob(pattern):
            if Path(folder, f"{name}.so").exists():
                return True
    return False


def _choose_auth(auth: str) -> str:
    if auth not in ("auto", "none", "munge"):
        raise ValueError(f"auth must be auto, none or munge, not {auth!r}")
    if auth != "auto":
        return auth
    return "none" if _plugin_available("auth_none") and _plugin_available("cred_none") else "munge"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_hardware() -> dict[str, str]:
    """The node line ``slurmd -C`` prints (CPUs, sockets, cores, RealMemory), as a dict."""
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    try:
        out = subprocess.run(
            ["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("NodeName="):
            for token in line.split():
                key, _, value = token.partition("=")
                if key in keep:
                    found[key] = value
    if "CPUs" not in found:
        found = {"CPUs": str(os.cpu_count() or 1)}
    if "RealMemory" not in found:
        found["RealMemory"] = str(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20)
    return found


def render_conf(
    root: Path,
    *,
    ctld_port: int,
    slurmd_port: int,
    hardware: dict[str, str],
    auth: str,
    munge_socket: Path | None = None,
    user: str = "root",
) -> str:
    """The slurm.conf of a one-node cluster whose every file lives under ``root``."""
    node = " ".join(f"{k}={v}" for k, v in hardware.items())
    if auth == "none":
        auth_lines = ["AuthType=auth/none", "CredType=cred/none"]
    else:
        auth_lines = [
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
        ]
    lines = [
        "# written by tests/slurm_cluster.py: a private single-node test cluster",
        f"ClusterName=hopper{secrets.token_hex(3)}",
        f"SlurmctldHost={NODE}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        f"SlurmUser={user}",
        "SlurmdUser=root",
        *auth_lines,
        # no cgroups, no systemd, no accounting database
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        "MpiDefault=none",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=100",  # else every job is given the whole node's memory, one at a time
        "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0",  # start a batch job at once
        "ReturnToService=2",
        "KillWait=5",  # seconds between SIGTERM and SIGKILL on scancel/timeout
        "MinJobAge=300",  # finished jobs stay visible to squeue/scontrol this long
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"NodeName={NODE} NodeAddr=127.0.0.1 {node} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def client_env(conf: Path, root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for Slurm commands (and jobs) aimed at this cluster only."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.startswith(_CLIENT_ENV_PREFIXES)
    }
    env["SLURM_CONF"] = str(conf)
    env[MARKER] = str(root)
    return env


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str]
    auth: str
    ctld_port: int
    slurmd_port: int
    node: str = NODE
    partition: str = PARTITION
    start_seconds: float = 0.0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(
        self, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""

    def logs(self, lines: int = 30) -> str:
        """The last lines of every daemon log, for an error message."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log", "slurmctld.out", "slurmd.out"):
            path = self.root / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def job_processes(self) -> list[psutil.Process]:
        """Live processes of this cluster other than its daemons: stepds and jobs."""
        daemons = {p.pid for p in self.procs.values()}
        return [
            proc
            for proc in marked_processes(str(self.root), exclude=daemons)
            if not _is_helper(proc, self.procs.get("slurmctld"))
        ]

    def job_ids(self) -> list[str]:
        out = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
        return out.stdout.split() if out.returncode == 0 else []


def _start(cluster: SlurmCluster, name: str, argv: list[str]) -> None:
    out = open(cluster.root / f"{name}.out", "wb")  # noqa: SIM115 - closed by the child's exit
    try:
        cluster.procs[name] = subprocess.Popen(
            argv,
            env=cluster.env,
            cwd=cluster.root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()


def _wait(
    cluster: SlurmCluster,
    what: str,
    ready: Callable[[], object],
    timeout: float,
    interval: float = 0.1,
) -> None:
    """Wait until ``ready()``; fail at once (with the daemons' logs) if one of them dies."""

    def daemons_alive() -> None:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise SlurmClusterError(
                    f"{name} exited with {proc.returncode} while waiting for {what}\n"
                    + cluster.logs()
                )

    try:
        poll_until(ready, timeout, what, interval=interval, check=daemons_alive)
    except WaitTimeout as exc:
        raise SlurmClusterError(f"{exc}\n{cluster.logs()}") from None


def _start_munge(cluster: SlurmCluster) -> Path:
    mdir = cluster.root / "munge"
    mdir.mkdir(mode=0o755)
    key = mdir / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    try:
        os.write(fd, secrets.token_bytes(1024))
    finally:
        os.close(fd)
    sock = mdir / "munge.socket"
    _start(
        cluster,
        "munged",
        [
            "munged",
            "--foreground",
            "--force",  # we are root and the temp dir is not munge's own
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={mdir / 'munged.pid'}",
            f"--log-file={cluster.root / 'munged.log'}",
            f"--seed-file={mdir / 'munged.seed'}",
        ],
    )
    _wait(cluster, "the munge socket", sock.exists, timeout=15, interval=0.05)
    return sock


@contextlib.contextmanager
def slurm_cluster(
    *, base_dir: Path | None = None, auth: str = "auto", start_timeout: float = 60.0
) -> Iterator[SlurmCluster]:
    """Start a private one-node Slurm cluster; stop it and remove every trace on exit."""
    reason = missing_prerequisites(auth)
    if reason:
        raise SlurmClusterError(reason)
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="hopper-slurm-", dir=base_dir))
    root.chmod(0o755)
    conf = root / "slurm.conf"
    cluster = SlurmCluster(
        root=root,
        conf=conf,
        env=client_env(conf, root),
        auth=_choose_auth(auth),
        ctld_port=free_port(),
        slurmd_port=free_port(),
    )
    while cluster.slurmd_port == cluster.ctld_port:
        cluster.slurmd_port = free_port()
    try:
        for sub in ("state", "spool"):
            (root / sub).mkdir(mode=0o755)
        (root / "plugstack.conf").write_text("")
        munge_socket = _start_munge(cluster) if cluster.auth == "munge" else None
        conf.write_text(
            render_conf(
                root,
                ctld_port=cluster.ctld_port,
                slurmd_port=cluster.slurmd_port,
                hardware=node_hardware(),
                auth=cluster.auth,
                munge_socket=munge_socket,
            )
        )
        _start(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        _start(cluster, "slurmd", ["slurmd", "-D", "-f", str(conf), "-N", NODE])
        _wait(cluster, "the node to be idle", lambda: cluster.node_state() == "idle", start_timeout)
        cluster.start_seconds = time.monotonic() - began
        yield cluster
    finally:
        _teardown(cluster)


def _teardown(cluster: SlurmCluster) -> None:
    if cluster.procs.get("slurmctld") and cluster.procs["slurmctld"].poll() is None:
        ids = cluster.job_ids()
        if ids:
            cluster.run("scancel", "--quiet", *ids, check=False, timeout=10)
            try:
                poll_until(lambda: not cluster.job_ids(), 15, "cancelled jobs", interval=0.1)
            except WaitTimeout:
                pass  # the daemons are stopped next, which ends what is left
    # slurmd first (it owns the steps), then the controller, munged last
    for name in ("slurmd", "slurmctld", "munged"):
        proc = cluster.procs.get(name)
        if proc is None or proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _kill_marked(str(cluster.root))
    shutil.rmtree(cluster.root, ignore_errors=True)


def _is_helper(proc: psutil.Process, ctld: subprocess.Popen[bytes] | None) -> bool:
    """slurmctld's own helper (``slurmscriptd``), which lives as long as it does."""
    try:
        return ctld is not None and proc.ppid() == ctld.pid
    except psutil.NoSuchProcess:
        return False


def marked_processes(root: str, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Live processes of the cluster under ``root``: anything carrying its marker in
    its environment (daemons, jobs) or working in its directory (``slurmstepd``,
    which rewrites its environment away and is re-parented to init)."""
    skip = {os.getpid(), *exclude}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            cwd = proc.cwd()
            mine = cwd == root or cwd.startswith(root + os.sep)
            if not mine:
                mine = proc.environ().get(MARKER) == root
            if mine and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _kill_marked(root: str) -> None:
    for proc in marked_processes(root):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(marked_processes(root), timeout=5)


if __name__ == "__main__":
    with slurm_cluster() as c:
        print(f"cluster up in {c.start_seconds:.2f}s (auth/{c.auth}); in another shell:")
        print(f"  export SLURM_CONF={c.conf}")
        print("Ctrl-C stops it.")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
