"""executor = "slurm": the pure parts (recovery decision, settling, resources, config)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from hopper.clock import SystemClock
from hopper.config import Config, SlurmConfig
from hopper.core import prompt as prompts
from hopper.core.prompt import BadPrompt
from hopper.core.recovery import Action, decide_slurm
from hopper.core.slurm_parse import (
    TERMINAL,
    SlurmExitFile,
    SlurmJob,
    SlurmParseError,
    SlurmState,
    parse_exit_file,
    settle,
)
from hopper.core.slurm_resources import slurm_request
from hopper.core.states import Reason
from hopper.executors import slurm_runner
from hopper.executors.slurm_runner import SlurmExecutor
from hopper.executors.slurm_view import StateView
from hopper.store.layout import Layout


def found(state: str, **kw: object) -> SlurmState:
    return SlurmState("7", True, SlurmJob("7", state, **kw))  # type: ignore[arg-type]


GONE = SlurmState("7", False)
EXIT_4 = SlurmExitFile("7", 4, None, "2026-11-22T13:35:40.000000Z")


@pytest.mark.parametrize(
    ("state", "exit_file", "action"),
    [
        (None, None, Action.ADOPT),  # the controller did not answer: never lost
        (found("RUNNING"), None, Action.ADOPT),
        (found("PENDING", reason="JobHeldUser"), None, Action.ADOPT),
        (found("COMPLETED", exit_code=0), None, Action.FINISH),
        (found("CANCELLED", signal=15), None, Action.FINISH),
        (GONE, EXIT_4, Action.FINISH),  # purged after MinJobAge, the wrapper recorded it
        (GONE, SlurmExitFile("6", 0, None, ""), Action.LOST),  # another job's record
        (GONE, None, Action.LOST),
    ],
)
def test_decide_slurm(
    state: SlurmState | None, exit_file: SlurmExitFile | None, action: Action
) -> None:
    assert decide_slurm(state, exit_file) is action


def test_settle_prefers_slurm_then_the_exit_file() -> None:
    assert settle(found("RUNNING"), EXIT_4) is None
    timeout = settle(found("TIMEOUT", signal=15), EXIT_4)
    assert timeout is not None and timeout.reason is Reason.TIMEOUT
    from_file = settle(GONE, EXIT_4)
    assert from_file is not None and from_file.reason is Reason.EXIT_NONZERO
    assert from_file.exit_code == 4
    signaled = settle(GONE, SlurmExitFile("7", None, 15, ""), Reason.ABORTED)
    assert signaled is not None and signaled.reason is Reason.ABORTED
    ok = settle(GONE, SlurmExitFile("7", 0, None, ""), Reason.ABORTED)
    assert ok is not None and ok.reason is Reason.COMPLETED  # it finished first
    lost = settle(GONE, None)
    assert lost is not None and lost.reason is Reason.LOST


def test_parse_exit_file() -> None:
    text = '{"slurm_job_id": "12", "exit_code": null, "signal": 9, "finished_at": "x"}'
    assert parse_exit_file(text) == SlurmExitFile("12", None, 9, "x")
    with pytest.raises(SlurmParseError):
        parse_exit_file('{"slurm_job_id": "12", "exit_code": "3"}')
    with pytest.raises(SlurmParseError):
        parse_exit_file("{torn")


def spec(front: str) -> prompts.PromptSpec:
    return prompts.parse(f"+++\n{front}\n+++\ntrue\n".encode())


def test_resources_front_matter_wins_over_config() -> None:
    defaults = SlurmConfig(cpus=2, mem="1G")
    got = slurm_request("slurm", spec('cpus = 4\ngres = "gpu:1"'), defaults)
    assert got == {"cpus": 4, "mem": "1G", "gres": "gpu:1"}
    assert slurm_request("local", spec(""), defaults) == {}  # defaults are for Slurm jobs only


def test_resources_on_a_local_job_or_bad_values_are_bad_prompts() -> None:
    with pytest.raises(BadPrompt, match="only apply to Slurm jobs"):
        slurm_request("local", spec('mem = "4G"'), SlurmConfig())
    with pytest.raises(BadPrompt, match="mem must be"):
        slurm_request("slurm", spec('mem = "lots"'), SlurmConfig())
    with pytest.raises(BadPrompt, match="gres must"):
        slurm_request("slurm", spec('gres = "gpu;rm -rf"'), SlurmConfig())


def test_config_keys() -> None:
    config = Config.model_validate(
        {
            "executor": "slurm",
            "slurm": {"partition": "gpu", "args": ["--account=lab"], "mem": "2G"},
            "routes": {"cluster": {"executor": "slurm"}, "here": {"executor": "local"}},
        }
    )
    assert config.slurm.sbatch_extra() == ["--partition=gpu", "--account=lab"]
    with pytest.raises(ValidationError):
        Config.model_validate({"executor": "k8s"})
    with pytest.raises(ValidationError):
        Config.model_validate({"slurm": {"mem": "lots"}})
    with pytest.raises(ValidationError):
        Config.model_validate({"slurm": {"nodes": 2}})


class _Listing(StateView):
    """A StateView whose Slurm listing is given, not asked for."""

    def __init__(self, jobs: list[SlurmJob]) -> None:
        super().__init__()
        self._jobs = jobs


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_stray_job_slurm_finished_is_not_cancelled(
    state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every finished state counts (OUT_OF_MEMORY, NODE_FAIL … not only the usual four)."""
    cancelled: list[str] = []
    monkeypatch.setattr(slurm_runner, "cancel", lambda sid, *_: cancelled.append(sid) or True)
    ctx = SimpleNamespace(
        layout=Layout(tmp_path),
        clock=SystemClock(),
        config=Config(),
        wake=lambda: None,
        keepalive=lambda: None,
    )
    jobs = SlurmExecutor(ctx)  # type: ignore[arg-type]
    listing = _Listing([SlurmJob("7", state, name="job-1"), SlurmJob("8", "RUNNING", "job-1")])
    (tmp_path / "runs" / "job-1").mkdir(parents=True)
    assert jobs.cancel_unrecorded("job-1", listing)
    assert cancelled == ["8"]
    jobs.close()
