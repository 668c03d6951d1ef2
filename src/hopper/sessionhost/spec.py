"""What the executor hands a new session host (on its stdin, as JSON: ``env`` holds
secrets). Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostSpec:
    name: str
    agent_name: str
    session_dir: str
    workdir: str
    agent: Mapping[str, Any]  # the job's agent spec: agent_for() picks the CLI
    env: Mapping[str, str]
    resume_id: str | None = None
    session_idle: float | None = 300.0
    session_max: float | None = 86400.0
    memory_max: int | None = None
    grace: float = 5.0
    settle: float = 3.0  # quiet seconds after the log says "waiting" before the turn ends
    own_job: str | None = None  # a session of its own: ends once this job's turn ended
    rows: int = 40
    cols: int = 120

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> HostSpec:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in obj.items() if k in names})
