"""executors/container.py and the container keys: argv, requests, engine and image errors.

No container engine is needed: the engine is a script in tmp_path where one is called.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hopper.agents.argv import in_container
from hopper.config import Config
from hopper.core import prompt as prompts
from hopper.core.container_job import container_request
from hopper.core.mounts import plan
from hopper.core.prompt import BadPrompt
from hopper.core.record import ContainerJob
from hopper.core.slurm_resources import slurm_request
from hopper.executors.container import (
    ContainerUnavailable,
    check_image,
    inspect,
    remove,
    resolve_engine,
    run_argv,
    shim_argv,
)
from hopper.executors.container_probe import has_program

JOB = ContainerJob(name="hopper-j1", image="img:1", network="none", cpus=2)


def spec(front: str) -> prompts.PromptSpec:
    return prompts.parse(f"+++\n{front}\n+++\nbody\n".encode())


def test_run_argv_maps_limits_network_env_names_and_paths() -> None:
    mmap = plan("/home/a/app", "/r/runs/j1")
    argv = run_argv(
        ["/usr/bin/podman", "--runtime", "runc"],
        JOB,
        mmap,
        ["HOPPER_RUN_DIR", "TOKEN"],
        ["bash", "--norc", "/r/runs/j1/script.sh"],
        run_args=["--ulimit", "nofile=1024:1024"],
        memory_max=512 << 20,
    )
    assert argv == [
        "/usr/bin/podman",
        "--runtime",
        "runc",
        "run",
        "--name",
        "hopper-j1",
        "--pull=never",
        "--log-driver=none",
        "-w",
        "/work",
        "-v",
        "/r/runs/j1:/hopper/run",
        "-v",
        "/home/a/app:/work",
        "-e",
        "HOPPER_RUN_DIR",
        "-e",
        "TOKEN",
        "--network=none",
        "--cpus=2",
        f"--memory={512 << 20}b",
        "--ulimit",
        "nofile=1024:1024",
        "img:1",
        "bash",
        "--norc",
        "/hopper/run/script.sh",
    ]


def test_no_value_of_the_environment_is_on_the_command_line() -> None:
    argv = run_argv(["podman"], JOB, plan("/w", "/r"), ["API_KEY"], ["true"])
    wrapped = shim_argv(["podman"], "hopper-j1", 10.0, argv)
    assert "API_KEY" in wrapped and not any("=" in a and "API_KEY" in a for a in wrapped)


def test_agent_turn_runs_in_the_container_with_paths_inside() -> None:
    box = {"prefix": ["wrap", "img"], "mounts": [["/r/j1", "/hopper/run"], ["/w", "/work"]]}
    argv = in_container(["/usr/local/bin/claude", "-p", "/r/j1/prompt.txt", "/etc/x"], box)
    assert argv == ["wrap", "img", "claude", "-p", "/hopper/run/prompt.txt", "/etc/x"]
    assert in_container(["sh", "/w/x"], box) == ["wrap", "img", "sh", "/work/x"]


def test_request_reads_front_matter_then_config() -> None:
    cfg = Config.model_validate({"container": {"image": "default:1"}}).container
    job = container_request("container", spec('executor = "container"\ncpus = 3'), cfg, "j1")
    assert job == ContainerJob(name="hopper-j1", image="default:1", cpus=3)
    own = container_request(
        "container",
        spec('image = "mine:2"\nmounts = ["/d:/d:ro"]\nnetwork = "none"'),
        cfg,
        "j1",
    )
    assert own is not None and (own.image, own.mounts, own.network) == (
        "mine:2",
        ["/d:/d:ro"],
        "none",
    )
    assert container_request("local", spec('agent = "bash"'), cfg, "j1") is None


def test_request_refuses_what_cannot_run() -> None:
    cfg = Config().container
    with pytest.raises(BadPrompt, match="a container job needs an image"):
        container_request("container", spec('agent = "bash"'), cfg, "j1")
    with pytest.raises(BadPrompt, match="image, network only apply to container jobs"):
        container_request("local", spec('image = "x"\nnetwork = "none"'), cfg, "j1")


def test_cpus_is_allowed_on_a_container_job_but_not_mem() -> None:
    cfg = Config().slurm
    assert slurm_request("container", spec("cpus = 2"), cfg) == {}
    with pytest.raises(BadPrompt, match="mem only apply to Slurm jobs"):
        slurm_request("container", spec('mem = "1G"'), cfg)
    with pytest.raises(BadPrompt, match="cpus only apply to Slurm jobs"):
        slurm_request("local", spec("cpus = 2"), cfg)


@pytest.mark.parametrize(
    ("front", "says"),
    [
        ('image = "--privileged"', "key 'image': may not start with '-'"),
        ('network = "host bridge"', "key 'network': may not start with '-' or contain spaces"),
        ('mounts = ["/a"]', "key 'mounts': '/a' is not /host/path:/in/container"),
        ('mounts = ["/a:/work"]', "hopper mounts the job's working directory"),
        ('executor = "docker"', "key 'executor'"),
    ],
)
def test_bad_container_keys_name_the_line(front: str, says: str) -> None:
    with pytest.raises(BadPrompt, match=says) as info:
        spec(front)
    assert info.value.line == 2


def test_engine_default_is_podman_then_docker() -> None:
    found = {"docker": "/usr/bin/docker"}
    assert resolve_engine(None, found.get) == ["/usr/bin/docker"]
    found["podman"] = "/usr/bin/podman"
    assert resolve_engine(None, found.get) == ["/usr/bin/podman"]
    assert resolve_engine(["podman", "--runtime", "runc"], found.get) == [
        "/usr/bin/podman",
        "--runtime",
        "runc",
    ]
    with pytest.raises(ContainerUnavailable, match="neither podman nor docker is on PATH"):
        resolve_engine(None, {}.get)
    with pytest.raises(ContainerUnavailable, match=r"fix \[container\] engine"):
        resolve_engine(["nerdctl"], found.get)


def fake_engine(tmp_path: Path, stderr: str, code: int, stdout: str = "") -> list[str]:
    path = tmp_path / "engine"
    path.write_text(f"#!/bin/sh\nprintf '%s' '{stdout}'\necho '{stderr}' >&2\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return [str(path)]


def test_check_image_says_pull_or_build(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path, "Error: inspecting object: img:1: image not known", 125)
    with pytest.raises(ContainerUnavailable) as info:
        check_image(engine, "img:1")
    assert "'img:1' is not in engine's local images (Error: inspecting" in info.value.detail
    assert "engine pull img:1" in info.value.detail and "hopper retry" in info.value.detail


def test_check_image_says_the_engine_does_not_answer(tmp_path: Path) -> None:
    engine = fake_engine(
        tmp_path, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", 1
    )
    with pytest.raises(ContainerUnavailable, match=r"does not answer .*start it"):
        check_image(engine, "img:1")


def test_check_image_passes_when_the_engine_has_it(tmp_path: Path) -> None:
    assert check_image(fake_engine(tmp_path, "", 0, "sha256:abc"), "img:1") == "sha256:abc"


def test_the_bash_probe_tells_present_missing_and_unknown(tmp_path: Path) -> None:
    """Only the engine's "not found" with 127 is "no bash"; an engine error is "cannot tell"
    (the job then runs and says what went wrong), never a refusal."""
    missing = 'Error: runc create failed: exec: "bash": executable file not found in $PATH'
    assert has_program(fake_engine(tmp_path, missing, 127), "img:1", "bash") is False
    assert has_program(fake_engine(tmp_path, "", 0), "img:1", "bash") is True
    assert has_program(fake_engine(tmp_path, "Error: storage is locked", 125), "i", "bash") is None
    assert has_program(fake_engine(tmp_path, "command failed", 127), "img:1", "bash") is None
    assert has_program([str(tmp_path / "no-such-engine")], "img:1", "bash") is None


def test_remove_treats_no_such_container_as_done(tmp_path: Path) -> None:
    assert remove(fake_engine(tmp_path, "Error: no container with name or ID x found", 1), "x")
    assert not remove(fake_engine(tmp_path, "Error: storage is locked", 1), "x")


def test_inspect_reads_the_engines_state(tmp_path: Path) -> None:
    state = '{"Running": false, "ExitCode": 3, "FinishedAt": "2026-01-01T00:00:00Z"}'
    got = inspect(fake_engine(tmp_path, "", 0, state), "x")
    assert got is not None and (got.running, got.exit_code) == (False, 3)
    assert inspect(fake_engine(tmp_path, "no such container", 125), "x") is None
    assert inspect(fake_engine(tmp_path, "", 0, "not json"), "x") is None


def test_container_config_keys() -> None:
    cfg = Config.model_validate(
        {"executor": "container", "container": {"engine": ["podman"], "run_args": ["--init"]}}
    )
    assert cfg.container.engine == ["podman"] and cfg.container.run_args == ["--init"]
    with pytest.raises(ValueError, match="engine"):
        Config.model_validate({"container": {"engine": []}})
