"""The two small interfaces of agents: an adapter prepares a job, a CLI is run by the driver.

Standard library only at run time (the rest under ``TYPE_CHECKING``): the driver
(``python -I -m hopper.agents.drive``) imports this module through the CLIs and
must start fast, without pydantic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hopper.config import AgentConfig
    from hopper.core.prompt import PromptSpec

# The job's ``${job.id}`` … values applied to a configured argv.
Fill = Callable[[Sequence[str]], list[str]]


@dataclass(frozen=True)
class JobContext:
    """What an adapter may know about the job it prepares."""

    job_id: str
    name: str
    run_dir: Path
    workdir: Path
    spec: PromptSpec
    values: dict[str, str] = field(default_factory=dict)  # ${job.id} … for configured commands
    # the job's max_cost_usd / max_tokens and the config's [prices] rows (agents/budget.py)
    budget: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preparation:
    """How to run the job: an argv (never a shell string), env, files to write first."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # run-dir name -> content
    stop_signals: list[int] = field(default_factory=lambda: [15])
    # The supervisor ends the job after this long without output (reason idle_timeout);
    # None for driver-run agents, whose driver judges idleness from the stream.
    idle_timeout: float | None = None
    # Where the job runs when that is not the job's own workdir (a session job's CLI runs
    # in the session's directory): the supervisor's cwd and job.json's ``workdir``.
    workdir: Path | None = None


class Agent(Protocol):
    name: str

    def prepare(self, job: JobContext) -> Preparation:
        """Build the run; raise :class:`hopper.core.prompt.BadPrompt` for unusable input."""
        ...


@dataclass(frozen=True)
class StderrProgress:
    """A CLI whose stdout is silent while it works (an answer is printed only once whole)
    but which can trace what it receives on stderr: ``env`` turns that tracing on (given
    the job's environment), and a stderr line holding ``marker`` is progress, kept out
    of job.log. Every other stderr line goes to job.log as it is."""

    env: Callable[[Mapping[str, str]], dict[str, str]]
    marker: bytes
    # one progress line -> the usage of a model response it reports, and the model
    usage: Callable[[bytes], tuple[dict[str, int], str | None] | None] | None = None


class Cli(Protocol):
    """One agent CLI the driver runs (agents/claude.py, codex.py, custom.py): what hopper
    knows about it, on both sides of ``agent.spec.json``. Standard library only."""

    kind: str  # its name in agent.spec.json
    # Its command, looked up on PATH or in tools/agents unless ``[agents.NAME] bin`` is
    # set; None when the configured argv template names it.
    binary: str | None
    # How its stream's progress shows when stdout is silent; None: stdout tells all.
    progress: StderrProgress | None

    def spec_keys(self, config: AgentConfig, fill: Fill) -> dict[str, Any]:
        """What it adds to agent.spec.json (after ``bin``), from its config table."""
        ...

    def argv(self, spec: Mapping[str, Any], session_id: str | None, resume: bool) -> list[str]:
        """Its argv for one turn. Never the prompt: that goes on stdin, or in a file."""
        ...

    def dialect(self, spec: Mapping[str, Any]) -> str:
        """What its stdout speaks: ``claude`` or ``codex`` JSON lines, or ``text``."""
        ...

    def session_for_turn(self, session_id: str | None, resume: bool) -> str | None:
        """The session id to call it with for one turn (``session_id``: the one known)."""
        ...


def extra_args(spec: Mapping[str, Any]) -> list[str]:
    """``[agents.NAME] args``, as written into the spec (already filled), appended."""
    return [str(a) for a in spec.get("args") or []]
