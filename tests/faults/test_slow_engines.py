"""A hung container engine or Slurm controller never stops the watcher's loop.

Before, the image check before each container start, ``sbatch``, ``squeue``,
``scancel`` and ``scontrol release`` ran on the loop with 60 s timeouts:
one hung podman or slurmctld and no ``WATCHDOG=1`` for a minute, against
``WatchdogSec=30`` in the unit (systemd kills the watcher). Now they run on
each executor's lane (executors/calls.py) with ``command_timeout`` deadlines.

Black-box: a real watcher process, fake engine and Slurm commands (shell
scripts that hang on request), systemd's side played by a datagram socket
(NOTIFY_SOCKET, WATCHDOG_USEC of 2 s: a ping every 0.8 s). While a command
hangs, WATCHDOG=1 and the heartbeat file keep coming, bash jobs dropped
behind the hung one start and finish, and the hung job ends (or, for Slurm,
goes back to the queue) with a reason naming the command and its deadline.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import psutil
import pytest

from conftest import FAST_CONFIG, bash, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

WATCHDOG_SEC = 2.0  # pings due every 0.8 s (0.8 x WatchdogSec/2)
DEADLINE = 3  # [container] / [slurm] command_timeout, seconds
HANG = 120  # seconds a hung fake command would take


class Systemd:
    """The NOTIFY_SOCKET end, read on a thread: when each WATCHDOG=1 arrived, and
    when the watcher's heartbeat file changed."""

    def __init__(self, path: Path, watchers: Path) -> None:
        self.path, self.watchers = path, watchers
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)
        self.pings: list[float] = []
        self.beats: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        seen: dict[Path, float] = {}
        while not self._stop.is_set():
            try:
                message = self.sock.recv(4096).decode()
                if "WATCHDOG=1" in message.split("\n"):
                    self.pings.append(time.monotonic())
            except TimeoutError:
                pass
            for beat in self.watchers.glob("*.json"):
                try:
                    mtime = beat.stat().st_mtime
                except FileNotFoundError:
                    continue
                if seen.get(beat) != mtime:
                    seen[beat] = mtime
                    self.beats.append(time.monotonic())

    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": str(self.path), "WATCHDOG_USEC": str(int(WATCHDOG_SEC * 1e6))}

    def gaps(self, since: float, until: float) -> tuple[float, float]:
        """The longest silence between WATCHDOG=1 pings, and between heartbeats, in a window."""

        def longest(times: list[float]) -> float:
            inside = [since, *(t for t in times if since <= t <= until), until]
            return max(b - a for a, b in pairwise(inside))

        return longest(list(self.pings)), longest(list(self.beats))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def systemd(tmp_path: Path, layout: Layout) -> Iterator[Systemd]:
    side = Systemd(tmp_path / "notify.sock", layout.state_dir / "watchers")
    yield side
    side.close()


def script(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def record_of(layout: Layout, name: str) -> object:
    for run_dir in layout.runs.iterdir():
        try:
            record = read_record(run_dir)
        except (FileNotFoundError, ValueError):
            continue
        if record.inbox_path.endswith(f"{name}.prompt.md"):
            return record
    return None


def run_dir_of(layout: Layout, name: str) -> Path:
    record = record_of(layout, name)
    assert record is not None, name
    return layout.run_dir(record.id)  # type: ignore[attr-defined]


def state_of(layout: Layout, name: str) -> JobState | None:
    record = record_of(layout, name)
    return None if record is None else record.state  # type: ignore[attr-defined]


def dead(pid_file: Path, parent: int | None = None) -> bool:
    """The first command that wrote its pid there (``PID [PPID]``, a line written whole)
    has ended; with ``parent``, the first that process started."""
    lines = [line.split() for line in pid_file.read_text().splitlines() if line.strip()]
    mine = [f[0] for f in lines if parent is None or f[1:] == [str(parent)]]
    return bool(mine) and mine[0].isdigit() and not psutil.pid_exists(int(mine[0]))


def bash_jobs_run_meanwhile(layout: Layout, names: list[str]) -> None:
    for name in names:
        drop(layout, name, bash(f"echo {name}"))
    for name in names:
        wait_for(lambda n=name: state_of(layout, n) is JobState.SUCCEEDED, what=f"{name} done")


def test_a_hung_image_check_costs_only_its_job(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """`podman image inspect` hangs: the loop pings on, bash jobs run, and the container
    job fails spawn_failed at the deadline, naming the call; the hung command is killed."""
    pid_file = tmp_path / "inspect.pid"
    engine = script(
        tmp_path / "fake-podman",
        f'if [ "$1 $2" = "image inspect" ]; then echo $$ > {pid_file}; exec sleep {HANG}; fi\n'
        'echo "fake engine: $*" >&2\nexit 1\n',
    )
    config_file.write_text(
        FAST_CONFIG + f'\n[container]\nengine = ["{engine}"]\ncommand_timeout = "{DEADLINE}s"\n'
    )
    watchers.start(env=systemd.env())
    drop(layout, "boxed", bash("echo never", executor="container", image="hopper-test/hangs:1"))
    wait_for(pid_file.exists, what="the image check hanging")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["a", "b", "c"])
    assert state_of(layout, "boxed") is JobState.QUEUED  # its start waits, blocking nothing
    wait_for(lambda: state_of(layout, "boxed") is JobState.FAILED, what="the container job failed")
    ended = time.monotonic()
    record = record_of(layout, "boxed")
    assert record.reason is Reason.SPAWN_FAILED  # type: ignore[attr-defined]
    assert (  # which call, and how long
        f"did not answer `image inspect hopper-test/hangs:1` within {DEADLINE}s" in record.detail  # type: ignore[attr-defined]
    ), record.detail  # type: ignore[attr-defined]
    assert "it was killed" in record.detail  # type: ignore[attr-defined]
    assert ended - began < DEADLINE + 5.0, "not at its deadline"
    wait_for(lambda: dead(pid_file), what="the hung engine call killed")
    ping_gap, beat_gap = systemd.gaps(began, ended)
    print(f"hung image check: max WATCHDOG gap {ping_gap:.2f}s, heartbeat gap {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 0.5 + 1.0, f"heartbeat {beat_gap:.2f}s apart"  # heartbeat_interval 0.5s


def fake_slurm(bin_dir: Path, state: Path) -> None:
    """sbatch / squeue hang while a marker file exists; squeue otherwise says it has no
    --json, so the state comes from `scontrol show job -o`: job 4242 once sbatch answered,
    in the state file's state."""
    bin_dir.mkdir()
    hangs = bin_dir.parent
    script(
        bin_dir / "sbatch",
        f"if [ -e {hangs}/sbatch-hangs ]; then echo $$ >> {hangs}/sbatch.pid\n"
        f"exec sleep {HANG}; fi\n"
        f"touch {hangs}/submitted\necho 4242\n",
    )
    script(
        bin_dir / "squeue",
        f'if [ -e {hangs}/squeue-hangs ]; then echo "$$ $PPID" >> {hangs}/squeue.pid\n'
        f"exec sleep {HANG}; fi\n"
        "echo \"squeue: unrecognized option '--json'\" >&2\nexit 1\n",
    )
    script(
        bin_dir / "scontrol",
        'if [ "$1" = release ]; then exit 0; fi\n'
        f"[ -e {hangs}/submitted ] || exit 0\n"
        f'echo "JobId=4242 JobName=remote JobState=$(cat {state}) Reason=None ExitCode=0:0"\n',
    )
    script(bin_dir / "scancel", "exit 0\n")


def test_a_hung_slurm_controller_never_stops_the_loop(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """sbatch hangs: the job goes back to the queue at the deadline saying so, while the
    loop pings and bash jobs run; then squeue hangs while the job runs: the same; when
    Slurm answers again the job finishes."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    fake_slurm(bin_dir, state)
    config_file.write_text(FAST_CONFIG + f'\n[slurm]\ncommand_timeout = "{DEADLINE}s"\n')
    env = {**systemd.env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    (tmp_path / "sbatch-hangs").touch()
    watchers.start(env=env)
    drop(layout, "remote", bash("echo on-slurm", executor="slurm"))
    wait_for(lambda: (tmp_path / "sbatch.pid").exists(), what="sbatch hanging")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["a", "b"])
    run_dir = run_dir_of(layout, "remote")

    def deferred() -> list[str]:
        return [e["why"] for e in read_events(run_dir) if e["event"] == "submit_deferred"]

    wait_for(deferred, what="the submit deferred")
    assert f"`sbatch` did not answer within {DEADLINE}s; it was killed" in deferred()[0]
    assert time.monotonic() - began < DEADLINE + 5.0, "not at its deadline"
    assert state_of(layout, "remote") is JobState.QUEUED
    wait_for(lambda: dead(tmp_path / "sbatch.pid"), what="the hung sbatch killed")
    sbatch_ended = time.monotonic()
    ping_gap, beat_gap = systemd.gaps(began, sbatch_ended)
    print(f"hung sbatch: max WATCHDOG gap {ping_gap:.2f}s, heartbeat gap {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"

    # Slurm answers sbatch again; the job runs; then squeue hangs under the poll.
    state.write_text("RUNNING")
    (tmp_path / "sbatch-hangs").unlink()
    wait_for(lambda: state_of(layout, "remote") is JobState.RUNNING, timeout=30, what="running")
    (tmp_path / "squeue-hangs").touch()
    wait_for((tmp_path / "squeue.pid").exists, what="squeue hanging")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["c", "d"])
    wait_for(lambda: dead(tmp_path / "squeue.pid"), what="the hung squeue killed")
    squeue_ended = time.monotonic()
    assert squeue_ended - began < DEADLINE + 5.0, "not at its deadline"
    assert state_of(layout, "remote") is JobState.RUNNING  # never read as lost
    state.write_text("COMPLETED")
    (tmp_path / "squeue-hangs").unlink()
    wait_for(lambda: state_of(layout, "remote") is JobState.SUCCEEDED, what="the Slurm job done")
    ping_gap, beat_gap = systemd.gaps(began, time.monotonic())
    print(f"hung squeue: max WATCHDOG gap {ping_gap:.2f}s, heartbeat gap {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"


def test_a_hung_engine_at_a_container_jobs_end_costs_only_its_job(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """The container exits 3 and `inspect` (the OOM check) hangs: the loop pings on, bash
    jobs run, and the job is filed exit_nonzero at the call's deadline, unrefined."""
    pid_file = tmp_path / "inspect.pid"
    engine = script(
        tmp_path / "fake-podman",
        'case "$1" in\n'
        "  image) echo sha256:0; exit 0 ;;\n"  # the image is here
        "  run) echo in-the-container; exit 3 ;;\n"
        f"  inspect) echo $$ >> {pid_file}; exec sleep {HANG} ;;\n"
        "esac\nexit 0\n",  # rm -f, stop
    )
    config_file.write_text(
        FAST_CONFIG + f'\n[container]\nengine = ["{engine}"]\ncommand_timeout = "{DEADLINE}s"\n'
    )
    watchers.start(env=systemd.env())
    drop(layout, "boxed", bash("exit 3", executor="container", image="hopper-test/ok:1"))
    wait_for(pid_file.exists, what="the engine's inspect hanging")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["a", "b", "c"])
    wait_for(lambda: state_of(layout, "boxed") is JobState.FAILED, what="the container job filed")
    ended = time.monotonic()
    record = record_of(layout, "boxed")
    assert record.reason is Reason.EXIT_NONZERO, record.detail  # type: ignore[attr-defined]
    assert record.exit_code == 3  # type: ignore[attr-defined]
    assert ended - began < DEADLINE + 5.0, "not at its deadline"
    wait_for(lambda: dead(pid_file), what="the hung engine call killed")
    ping_gap, beat_gap = systemd.gaps(began, ended)
    print(f"hung inspect at the end: max WATCHDOG gap {ping_gap:.2f}s, heartbeat {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"


def git_repo_and_slow_git(tmp_path: Path, verb: str) -> tuple[Path, Path, dict[str, str]]:
    """A repository, and a `git` first on PATH that takes 8 s over `worktree VERB`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "t@example.com"],
        ["config", "user.name", "t"],
        ["commit", "-q", "--allow-empty", "-m", "init"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    real_git = shutil.which("git")
    bin_dir, slow = tmp_path / "bin", tmp_path / "git-slow"
    bin_dir.mkdir()
    script(
        bin_dir / "git",
        f'case " $* " in *" worktree {verb} "*) touch {slow}; sleep 8 ;; esac\n'
        f'exec {real_git} "$@"\n',
    )
    return repo, slow, {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_slow_git_worktree_add_never_stops_the_loop(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """`git worktree add` takes 8 s (a big checkout, a lock): the loop pings on, bash
    jobs start and finish meanwhile, and the worktree job then runs in its worktree."""
    repo, slow, path = git_repo_and_slow_git(tmp_path, "add")
    watchers.start(env={**systemd.env(), **path})
    drop(layout, "tree", bash("pwd", workdir=str(repo), workspace="worktree"))
    wait_for(slow.exists, what="git worktree add under way")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["a", "b"])
    assert state_of(layout, "tree") is JobState.QUEUED, "the bash jobs waited for git"
    wait_for(lambda: state_of(layout, "tree") is JobState.SUCCEEDED, what="the worktree job")
    ended = time.monotonic()
    record = record_of(layout, "tree")
    log = (layout.run_dir(record.id) / "job.log").read_text()  # type: ignore[attr-defined]
    assert log.strip() == str(layout.root / "worktrees" / record.id)  # type: ignore[attr-defined]
    ping_gap, beat_gap = systemd.gaps(began, ended)
    print(f"slow worktree add: max WATCHDOG gap {ping_gap:.2f}s, heartbeat gap {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"


def test_a_slow_git_worktree_remove_never_stops_the_loop(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """`git worktree remove` after a success takes 8 s: the loop pings on, bash jobs start
    and finish meanwhile, and the worktree is then removed (event workspace_removed)."""
    repo, slow, path = git_repo_and_slow_git(tmp_path, "remove")
    watchers.start(env={**systemd.env(), **path})
    drop(layout, "tree", bash("true", workdir=str(repo), workspace="worktree"))
    wait_for(slow.exists, what="git worktree remove under way")
    began = time.monotonic()
    bash_jobs_run_meanwhile(layout, ["a", "b"])
    run_dir = run_dir_of(layout, "tree")

    def events() -> list[str]:
        return [e["event"] for e in read_events(run_dir)]

    assert "workspace_removed" not in events(), "the bash jobs waited for git"
    wait_for(lambda: "workspace_removed" in events(), what="the worktree removed")
    ended = time.monotonic()
    assert not (layout.root / "worktrees" / run_dir.name).exists()
    ping_gap, beat_gap = systemd.gaps(began, ended)
    print(f"slow worktree remove: max WATCHDOG gap {ping_gap:.2f}s, heartbeat gap {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"


def test_recovery_waits_on_a_hung_squeue_with_keepalives(
    layout: Layout, config_file: Path, watchers, systemd: Systemd, tmp_path: Path
) -> None:
    """A watcher killed while its Slurm job runs; the next one's recovery must ask Slurm,
    and squeue hangs: it waits for the call with heartbeat and WATCHDOG=1 going, the call
    is killed at its deadline, and the job is adopted (never read as lost), then finished."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    fake_slurm(bin_dir, state)
    config_file.write_text(FAST_CONFIG + f'\n[slurm]\ncommand_timeout = "{DEADLINE}s"\n')
    env = {**systemd.env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    state.write_text("RUNNING")
    first = watchers.start(env=env)
    drop(layout, "remote", bash("echo on-slurm", executor="slurm"))
    wait_for(lambda: state_of(layout, "remote") is JobState.RUNNING, what="running")
    first.kill()
    first.wait()
    (tmp_path / "squeue-hangs").touch()
    second = watchers.start(env=env)
    pids = tmp_path / "squeue.pid"

    def asked() -> bool:
        return pids.exists() and f" {second.pid}" in pids.read_text()

    wait_for(asked, what="recovery's squeue hanging")
    began = time.monotonic()
    # Only the second watcher's: a squeue the first had begun just before its SIGKILL
    # may find the marker, hang, and outlive it (no one left to kill it at a deadline).
    wait_for(lambda: dead(pids, second.pid), what="the hung squeue killed")
    ended = time.monotonic()
    assert ended - began < DEADLINE + 5.0, "not at its deadline"
    run_dir = run_dir_of(layout, "remote")
    assert state_of(layout, "remote") is JobState.RUNNING  # Slurm did not answer: not lost
    (tmp_path / "squeue-hangs").unlink()
    state.write_text("COMPLETED")
    wait_for(lambda: state_of(layout, "remote") is JobState.SUCCEEDED, what="finished")
    assert "adopted" in [e["event"] for e in read_events(run_dir)]
    ping_gap, beat_gap = systemd.gaps(began, ended)
    print(f"recovery on a hung squeue: max WATCHDOG gap {ping_gap:.2f}s, heartbeat {beat_gap:.2f}s")
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < 1.5, f"heartbeat {beat_gap:.2f}s apart"
