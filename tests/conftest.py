"""Shared fixtures: a fresh root per test, a fast config, real watcher processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from hopper.proc import forkclient
from hopper.store.layout import Layout
from modelserver import ModelServer
from waiting import poll_until

pytest_plugins = ["sessionjobs"]  # the interactive-job tests' fixtures (hosts, work)

FAST_CONFIG = """\
default_agent = "bash"
settle = "0.3s"
poll_interval = "0.05s"
rescan_interval = "0.5s"
heartbeat_interval = "0.5s"
kill_grace = "1s"
retry_backoff = "0.1s"
"""


def wait_for(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Wait for something observable, with a deadline (never a bare sleep)."""
    poll_until(predicate, timeout, what or repr(predicate))


@pytest.fixture
def server() -> Iterator[forkclient.ForkServer]:
    """A started fork server (proc/forkclient.py), closed after the test."""
    srv = forkclient.ForkServer()
    srv.start()
    yield srv
    srv.close()


def beat_advanced(layout: Layout, seconds: float) -> None:
    """Wait until a watcher of ``layout`` has written its heartbeat ``seconds`` past now:
    its loop ran through that time (a bare sleep proves nothing about the watcher's turns,
    which a loaded machine may starve)."""
    since = time.time()
    wait_for(
        lambda: any(
            p.stat().st_mtime > since + seconds
            for p in (layout.state_dir / "watchers").glob("*.json")
        ),
        what=f"the watcher beating {seconds}s on",
    )


def drop(layout: Layout, name: str, text: str | bytes, sub: str = "") -> Path:
    """Put a prompt in the inbox the safe way: write a dot-name, then rename."""
    folder = layout.inbox / sub if sub else layout.inbox
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_bytes(text.encode() if isinstance(text, str) else text)
    target = folder / f"{name}.prompt.md"
    os.rename(tmp, target)
    return target


def bash(script: str, **options: str) -> str:
    front = "".join(f'{k} = "{v}"\n' for k, v in options.items())
    return f'+++\nagent = "bash"\n{front}+++\n{script}\n'


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    lay = Layout(tmp_path / "root")
    lay.ensure()
    return lay


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(FAST_CONFIG)
    return path


def hopper_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "hopper", *args]


@pytest.fixture
def hopper(layout: Layout, config_file: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a hopper command against the test root; returns the completed process."""

    def run(
        *args: str, timeout: float = 60, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, **(env or {})}
        return subprocess.run(
            hopper_cmd(*args, "--root", str(layout.root), "--config", str(config_file))
            if args and args[0] not in ("schema",)
            else hopper_cmd(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=full,
        )

    return run


class Watchers:
    """Background watcher processes, ended (and checked) at teardown."""

    def __init__(self, layout: Layout, config_file: Path) -> None:
        self.layout = layout
        self.config_file = config_file
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, *extra: str, env: dict[str, str] | None = None, stderr: Path | None = None
    ) -> subprocess.Popen[str]:
        err = open(stderr, "a") if stderr else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(
            hopper_cmd(
                "run", "--root", str(self.layout.root), "--config", str(self.config_file), *extra
            ),
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def watchers(layout: Layout, config_file: Path) -> Iterator[Watchers]:
    w = Watchers(layout, config_file)
    yield w
    w.stop_all()


@pytest.fixture(autouse=True)
def _no_leaked_processes(tmp_path: Path) -> Iterator[None]:
    """Fail a test that leaves processes running with its tmp_path in their command line."""
    yield
    marker = str(tmp_path)

    def leaked() -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            try:
                cmd = " ".join(proc.info["cmdline"] or [])
                if (
                    proc.pid != os.getpid()
                    and (marker in cmd or (proc.info["cwd"] or "").startswith(marker))
                    and proc.status() != psutil.STATUS_ZOMBIE
                ):
                    out.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out

    # Jobs still winding down get 10 s to exit (waited on, not polled by us).
    _, left = psutil.wait_procs(leaked(), timeout=10)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"processes leaked: {[p.pid for p in left]}"


@pytest.fixture
def srv() -> Iterator[ModelServer]:
    """The suite's own model server on 127.0.0.1 (Anthropic Messages + OpenAI Responses)."""
    with ModelServer() as server:
        yield server
