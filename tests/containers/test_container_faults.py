"""Container jobs under faults (issue 27): where `check` runs, a killed engine client, an
image without bash. A real watcher, real podman, the locally built busybox images."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from conftest import drop, wait_for
from containers.engine import container_config, containers_of
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_exit, read_record
from hopper.store.layout import Layout

pytestmark = pytest.mark.usefixtures("no_containers_left")


def use(config_file: Path, extra: str = "") -> None:
    config_file.write_text(config_file.read_text() + container_config(extra))


def only_run(layout: Layout) -> Path:
    dirs = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def state_of(run_dir: Path) -> JobState | None:
    try:
        return read_record(run_dir).state
    except (FileNotFoundError, ValueError):
        return None


def engine_client(name: str) -> psutil.Process | None:
    """The ``podman run --name NAME`` client process, if it runs."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "run" in cmd and "--name" in cmd and name in cmd and "container_run.py" not in str(cmd):
            return proc
    return None


def test_sigkill_of_the_engine_client_is_recorded_as_a_signal(
    layout: Layout, config_file: Path, watchers
) -> None:
    """The `podman run` client SIGKILLed: the job is `failed/signaled` with signal 9 in
    exit.json and job.json, no traceback in job.log, and the container does not run on
    (was: `OSError: [Errno 22]` from signal.signal(SIGKILL) in job.log, `exit_nonzero`)."""
    use(config_file)
    drop(layout, "killed", '+++\nagent = "bash"\n+++\necho up; sleep 300\n')
    watchers.start()
    wait_for(lambda: layout.runs.exists() and any(layout.runs.iterdir()), what="a run directory")
    run_dir = only_run(layout)
    log = run_dir / "job.log"
    wait_for(lambda: log.exists() and "up" in log.read_text(), timeout=60, what="the job up")
    name = f"hopper-{run_dir.name}"
    client = wait_for_client(name)
    client.send_signal(signal.SIGKILL)
    wait_for(lambda: state_of(run_dir) is JobState.FAILED, timeout=60, what="failed")
    record = read_record(run_dir)
    assert (record.reason, record.signal) == (Reason.SIGNALED, 9), record.detail
    status = read_exit(run_dir)
    assert status is not None and status.signal == 9
    text = log.read_text()
    assert "Traceback" not in text and "Errno 22" not in text, text
    assert any(e["event"] == "exited" and e.get("signal") == 9 for e in read_events(run_dir))
    wait_for(lambda: containers_of(layout) == [], timeout=30, what="the container removed")


def wait_for_client(name: str) -> psutil.Process:
    found: list[psutil.Process] = []

    def seen() -> bool:
        proc = engine_client(name)
        if proc is not None:
            found.append(proc)
        return proc is not None

    wait_for(seen, timeout=30, what=f"the engine client of {name}")
    return found[-1]


def test_a_bash_job_in_an_image_without_bash_fails_at_start_saying_so(
    layout: Layout, config_file: Path, hopper, image_without_bash: str
) -> None:
    """busybox (or alpine) has sh, not bash: the job fails `spawn_failed` before it runs,
    the reason names the missing bash and the fix (was: `exit_nonzero` 127, the OCI
    runtime's "executable file not found" in job.log as the only clue)."""
    use(config_file)
    drop(
        layout,
        "nobash",
        f'+++\nagent = "bash"\nimage = "{image_without_bash}"\n+++\ntouch ran\n',
    )
    assert hopper("run", "--until-idle", timeout=120).returncode == 0
    run_dir = only_run(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED), record
    detail = record.detail or ""
    assert f"image '{image_without_bash}' has no bash" in detail, detail
    assert "apk add bash" in detail and "hopper retry" in detail, detail
    assert record.exit_code is None
    assert not (run_dir / "work" / "ran").exists()


AGENT_WRITES_A_SCRIPT = (
    "\n[agents.boxed]\n"
    'argv = ["sh", "-c", "echo \'pwd > where.txt; ls /sys/class/net > nets.txt\' '
    '> run-tests.sh", "{prompt_file}"]\n'
    "stdin = false\n"
)


def test_check_runs_in_the_jobs_container_not_on_the_host(
    layout: Layout, config_file: Path, hopper
) -> None:
    """An agent in a `network = "none"` container writes run-tests.sh into the workdir;
    `check = ["sh", "run-tests.sh"]` runs it in the job's container (its working directory
    the workdir's mount, no network but loopback), not on the host as the watcher's user
    (was: on the host, in the host's workdir)."""
    use(config_file, AGENT_WRITES_A_SCRIPT)
    drop(
        layout,
        "checked",
        '+++\nagent = "boxed"\nnetwork = "none"\ncheck = ["sh", "run-tests.sh"]\n+++\nwrite it\n',
    )
    assert hopper("run", "--until-idle", timeout=120).returncode == 0
    run_dir = only_run(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    work = run_dir / "work"
    assert (work / "where.txt").read_text().strip() == "/work"
    assert (work / "nets.txt").read_text().split() == ["lo"]
    assert "[check] sh run-tests.sh (in the container)" in (run_dir / "job.log").read_text()
