"""The one small interface every agent adapter implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hopper.core.prompt import PromptSpec


@dataclass(frozen=True)
class JobContext:
    """What an adapter may know about the job it prepares."""

    job_id: str
    name: str
    run_dir: Path
    workdir: Path
    spec: PromptSpec
    values: dict[str, str] = field(default_factory=dict)  # ${job.id} … for configured commands


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


class Agent(Protocol):
    name: str

    def prepare(self, job: JobContext) -> Preparation:
        """Build the run; raise :class:`hopper.core.prompt.BadPrompt` for unusable input."""
        ...
