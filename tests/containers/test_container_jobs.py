"""Container jobs end to end: a real watcher, real podman, the locally built busybox image."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from conftest import drop, wait_for
from containers.engine import ENGINE, container_config, containers_of, image_tar
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

pytestmark = pytest.mark.usefixtures("no_containers_left")

SECRET = "s3cr3t-value-7f1c"
DOCKER_IMAGE = "hopper-test-busybox:1"


def toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def job(script: str, **front: object) -> str:
    keys = "".join(f"{k} = {toml(v)}\n" for k, v in front.items())
    return f'+++\nagent = "bash"\n{keys}+++\n{script}\n'


def use(config_file: Path, extra: str = "", engine: list[str] | None = None) -> None:
    config_file.write_text(config_file.read_text() + container_config(extra, engine))


def only_run(layout: Layout) -> Path:
    dirs = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def state_of(run_dir: Path) -> JobState | None:
    try:
        return read_record(run_dir).state
    except (FileNotFoundError, ValueError):
        return None


def events_of(run_dir: Path) -> list[str]:
    return [e["event"] for e in read_events(run_dir)]


def test_env_mount_workdir_live_log_and_no_secret_on_a_command_line(
    layout: Layout, config_file: Path, watchers, tmp_path: Path
) -> None:
    """The workdir is /work and the cwd; a mount is readable; config [env] and front-matter
    env arrive; HOPPER_RUN_DIR and the prompt are paths inside; job.log is live; no process
    on the host has the secret's value on its command line."""
    use(config_file, '[env]\nFROM_CONFIG = "cfg-value"\n')
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    (data / "in.txt").write_text("mounted\n")
    script = (
        "echo first\n"
        "while [ ! -e /work/gate ]; do sleep 0.05; done\n"
        'echo "cwd=$(pwd) cfg=$FROM_CONFIG secret=$SECRET run=$HOPPER_RUN_DIR"\n'
        "cat /data/in.txt\n"
        "head -1 $HOPPER_RUN_DIR/prompt.md\n"
        "echo made > out.txt\n"
        "(echo nope > /data/x) 2>/dev/null || echo read-only\n"
    )
    drop(
        layout,
        "env",
        job(script, workdir=str(work), env={"SECRET": SECRET}, mounts=[f"{data}:/data:ro"]),
    )
    watchers.start()
    wait_for(lambda: layout.runs.exists() and any(layout.runs.iterdir()), what="a run directory")
    run_dir = only_run(layout)
    log = run_dir / "job.log"
    wait_for(lambda: log.exists() and log.read_text() == "first\n", what="the live first line")
    running = read_record(run_dir)
    assert running.state is JobState.RUNNING and running.container is not None
    assert containers_of(layout) == [running.container.name] == [f"hopper-{running.id}"]
    for proc in psutil.process_iter(["cmdline"]):
        assert SECRET not in " ".join(proc.info["cmdline"] or []), proc.info["cmdline"]
    (work / "gate").touch()
    wait_for(lambda: state_of(run_dir) is JobState.SUCCEEDED, what="success")
    assert log.read_text().splitlines() == [
        "first",
        f"cwd=/work cfg=cfg-value secret={SECRET} run=/hopper/run",
        "mounted",
        "+++",
        "read-only",
    ]
    assert (work / "out.txt").read_text() == "made\n"
    record = read_record(run_dir)
    assert record.executor == "container" and record.container is not None
    assert record.container.name == f"hopper-{record.id}"
    assert SECRET not in (run_dir / "job.json").read_text()
    assert SECRET not in (run_dir / "events.jsonl").read_text()


def test_exit_code_is_mapped(layout: Layout, config_file: Path, hopper) -> None:
    use(config_file)
    drop(layout, "three", job("echo bye; exit 3"))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_run(layout))
    assert (record.state, record.reason, record.exit_code) == (
        JobState.FAILED,
        Reason.EXIT_NONZERO,
        3,
    )
    assert containers_of(layout) == []


def test_abort_is_the_engines_stop_with_the_grace(
    layout: Layout, config_file: Path, watchers
) -> None:
    """PID 1 ignores SIGTERM: the engine's stop waits kill_grace (1 s), then kills. The
    supervisor (which would SIGKILL after kill_grace + 5 s) never has to."""
    use(config_file)
    drop(layout, "abort", job("echo up; sleep 300"))
    watchers.start()
    wait_for(lambda: layout.runs.exists() and any(layout.runs.iterdir()), what="a run directory")
    run_dir = only_run(layout)
    wait_for(lambda: (run_dir / "job.log").exists() and "up" in (run_dir / "job.log").read_text())
    (run_dir / "ABORT").touch()
    wait_for(lambda: state_of(run_dir) is JobState.ABORTED, timeout=30, what="aborted")
    events = read_events(run_dir)
    asked = next(e for e in events if e["event"] == "abort_requested")
    exited = next(e for e in events if e["event"] == "exited")
    assert not any(e["event"] == "signal_sent" and e.get("signal") == "SIGKILL" for e in events)
    assert exited["exit_code"] == 137  # the engine's SIGKILL after its grace
    from datetime import datetime

    took = datetime.fromisoformat(exited["ts"]) - datetime.fromisoformat(asked["ts"])
    assert took.total_seconds() < 5.5
    assert containers_of(layout) == []


def test_timeout(layout: Layout, config_file: Path, hopper) -> None:
    use(config_file)
    drop(layout, "slow", job("sleep 300", timeout="2s"))
    assert hopper("run", "--until-idle", timeout=60).returncode == 0
    record = read_record(only_run(layout))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.TIMEOUT)


def test_watcher_sigkill_then_restart_adopts_and_runs_once(
    layout: Layout, config_file: Path, watchers, tmp_path: Path
) -> None:
    use(config_file)
    work = tmp_path / "work"
    work.mkdir()
    script = "echo run >> /work/runs\nwhile [ ! -e /work/gate ]; do sleep 0.05; done\nexit 0"
    drop(layout, "adopt", job(script, workdir=str(work)))
    first = watchers.start()
    wait_for(lambda: (work / "runs").exists(), what="the job running")
    first.send_signal(signal.SIGKILL)
    first.wait()
    run_dir = only_run(layout)
    assert state_of(run_dir) is JobState.RUNNING
    watchers.start()
    wait_for(lambda: "adopted" in events_of(run_dir), what="the job adopted")
    (work / "gate").touch()
    wait_for(lambda: state_of(run_dir) is JobState.SUCCEEDED, what="success")
    assert (work / "runs").read_text() == "run\n"
    assert events_of(run_dir).count("started") == 1


def test_a_container_left_by_a_crash_is_removed_and_the_job_runs_once(
    layout: Layout, config_file: Path, watchers, tmp_path: Path
) -> None:
    """A queued job whose container already exists (created, never recorded): recovery
    removes it before the job starts; the job runs once, in a fresh container."""
    use(config_file)
    work = tmp_path / "work"
    work.mkdir()
    (layout.root / "PAUSE").touch()
    drop(layout, "stray", job("echo run >> /work/runs", workdir=str(work)))
    first = watchers.start()
    wait_for(lambda: layout.runs.exists() and any(layout.runs.iterdir()), what="a run directory")
    run_dir = only_run(layout)
    wait_for(lambda: state_of(run_dir) is JobState.QUEUED, what="queued")
    first.send_signal(signal.SIGKILL)
    first.wait()
    name = f"hopper-{run_dir.name}"
    subprocess.run(
        [*ENGINE, "create", "--name", name, "localhost/hopper-test-busybox:1", "true"],
        capture_output=True,
        check=True,
    )
    (layout.root / "PAUSE").unlink()
    watchers.start()
    wait_for(lambda: state_of(run_dir) is JobState.SUCCEEDED, what="success")
    assert "container_stray_removed" in events_of(run_dir)
    assert (work / "runs").read_text() == "run\n"


def test_missing_image_fails_with_what_to_do(layout: Layout, config_file: Path, hopper) -> None:
    use(config_file)
    drop(layout, "noimage", job("true", image="localhost/hopper-no-such-image:1"))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_run(layout))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED)
    assert record.detail is not None
    assert "'localhost/hopper-no-such-image:1' is not in podman's local images" in record.detail
    assert "podman pull localhost/hopper-no-such-image:1" in record.detail


def test_custom_agent_in_a_container(layout: Layout, config_file: Path, hopper) -> None:
    """The driver stays on the host; the agent's CLI runs in the container, reading the
    prompt file at its path inside."""
    use(
        config_file,
        '\n[agents.boxed]\nargv = ["sh", "-c", "echo in $(pwd); cat \\"$0\\"", "{prompt_file}"]\n'
        "stdin = false\n",
    )
    drop(layout, "agent", '+++\nagent = "boxed"\n+++\nsay hello from the box\n')
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_run(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    text = (run_dir / "job.log").read_text()
    assert "in /work" in text
    assert "say hello from the box" in text


def test_missing_engine_fails_with_what_to_do(
    layout: Layout, config_file: Path, hopper, tmp_path: Path
) -> None:
    use(config_file, engine=[str(tmp_path / "no-such-podman")])
    drop(layout, "noengine", job("true"))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_run(layout))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED)
    assert record.detail is not None and "is not on PATH" in record.detail
    assert "[container] engine" in record.detail


def _docker_answers() -> str | None:
    if not any(os.access(os.path.join(p, "docker"), os.X_OK) for p in os.get_exec_path()):
        return "docker is not installed"
    done = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"no docker engine answers here (docker info: {said})"
    return None


def test_docker_runs_the_same_adapter(
    layout: Layout, config_file: Path, hopper, tmp_path: Path
) -> None:
    reason = _docker_answers()
    if reason:
        pytest.skip(reason)
    tar = tmp_path / "busybox.tar"
    tar.write_bytes(image_tar())
    subprocess.run(["docker", "import", str(tar), DOCKER_IMAGE], capture_output=True, check=True)
    use(config_file, engine=["docker"])
    drop(layout, "docker", job("echo in-docker; exit 3", image=DOCKER_IMAGE))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_run(layout)
    record = read_record(run_dir)
    assert (record.reason, record.exit_code) == (Reason.EXIT_NONZERO, 3)
    assert (run_dir / "job.log").read_text() == "in-docker\n"
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"name=hopper-{record.id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == ""


def test_supervisor_gone_the_engine_says_how_the_container_ended(
    layout: Layout, config_file: Path, watchers, tmp_path: Path
) -> None:
    """Watcher and supervisor SIGKILLed; the container ends on its own while no watcher
    runs; the next watcher finalizes the job from the engine's record (exit 4), not lost."""
    use(config_file)
    work = tmp_path / "work"
    work.mkdir()
    script = "echo run >> /work/runs\nwhile [ ! -e /work/gate ]; do sleep 0.05; done\nexit 4"
    drop(layout, "orphan", job(script, workdir=str(work)))
    first = watchers.start()
    wait_for(lambda: (work / "runs").exists(), what="the job running")
    run_dir = only_run(layout)
    supervisor = read_record(run_dir).supervisor_pid
    assert supervisor is not None
    first.send_signal(signal.SIGKILL)
    first.wait()
    os.kill(supervisor, signal.SIGKILL)
    (work / "gate").touch()
    name = f"hopper-{run_dir.name}"

    def exited() -> bool:
        done = subprocess.run(
            [*ENGINE, "inspect", "--format", "{{.State.Status}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() == "exited"

    wait_for(exited, what="the container to exit with no supervisor")
    watchers.start()
    wait_for(lambda: state_of(run_dir) is JobState.FAILED, what="finalized")
    record = read_record(run_dir)
    assert (record.reason, record.exit_code) == (Reason.EXIT_NONZERO, 4)
    assert "container_exit_from_engine" in events_of(run_dir)
    assert (work / "runs").read_text() == "run\n"


def test_supervisor_gone_a_running_container_is_ended_and_the_job_lost(
    layout: Layout, config_file: Path, watchers, tmp_path: Path
) -> None:
    use(config_file)
    work = tmp_path / "work"
    work.mkdir()
    drop(layout, "stuck", job("echo run >> /work/runs\nsleep 300", workdir=str(work)))
    first = watchers.start()
    wait_for(lambda: (work / "runs").exists(), what="the job running")
    run_dir = only_run(layout)
    supervisor = read_record(run_dir).supervisor_pid
    assert supervisor is not None
    first.send_signal(signal.SIGKILL)
    first.wait()
    os.kill(supervisor, signal.SIGKILL)
    watchers.start()
    wait_for(lambda: state_of(run_dir) is JobState.FAILED, what="filed lost")
    assert read_record(run_dir).reason is Reason.LOST
    assert containers_of(layout) == []


def test_memory_max_and_cpus_reach_the_engine(layout: Layout, config_file: Path, hopper) -> None:
    use(config_file)
    script = (
        "cat /sys/fs/cgroup/memory.max 2>/dev/null"
        " || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
    )
    drop(layout, "limits", job(script, memory_max="64M", cpus=1))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_run(layout)
    assert read_record(run_dir).state is JobState.SUCCEEDED
    assert (run_dir / "job.log").read_text().strip() == str(64 << 20)


def test_past_memory_max_the_engines_oom_killer_ends_it(
    layout: Layout, config_file: Path, hopper
) -> None:
    """memory_limit where the engine reports OOMKilled (docker; podman on cgroup v2);
    podman with runc on cgroup v1 does not, and exit 137 then says what it likely was."""
    use(config_file)
    script = 'x=$(head -c 200000000 /dev/zero | tr "\\0" a); echo survived ${#x}'
    drop(layout, "hog", job(script, memory_max="64M"))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_run(layout))
    assert record.state is JobState.FAILED
    assert record.reason in (Reason.MEMORY_LIMIT, Reason.EXIT_NONZERO), record.detail
    assert record.detail is not None and "engine's OOM killer" in record.detail
    assert "memory_max (64.0M)" in record.detail
    assert "survived" not in (only_run(layout) / "job.log").read_text()
