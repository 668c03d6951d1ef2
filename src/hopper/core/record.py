"""The job record (job.json) and the supervisor's exit record (exit.json), as data.

These are the models behind the files; reading and writing them is
``hopper.store.jobfile``'s job. ``schemas/job.schema.json`` is generated from
:class:`JobRecord` (``hopper schema``) and checked in CI to be current.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hopper.core.states import JobState, Reason

SCHEMA_VERSION: Literal[1] = 1


class Usage(BaseModel):
    """Token and cost figures as the agent reported them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None


class JobRecord(BaseModel):
    """One job: ``runs/<id>/job.json``. Always complete; replaced atomically."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    id: str = Field(description="unique, sorts by claim time, safe as a file name")
    name: str = Field(description="the prompt's name: front matter `name`, else the file stem")
    state: JobState
    reason: Reason | None = Field(None, description="why the job ended; null until terminal")
    detail: str | None = Field(None, description="a sentence a person can act on")
    exit_code: int | None = None
    signal: int | None = Field(None, description="the signal that ended the job, if any")
    agent: str
    attempt: int = Field(1, description="1-based; earlier attempts' logs are job.<n>.log")
    retries: int = Field(0, description="extra attempts allowed after the first")
    not_before: datetime | None = Field(None, description="a retry waits until this time")
    pid: int | None = Field(None, description="the job's main process (its process group leader)")
    pid_start_time: float | None = Field(None, description="its start time (epoch seconds)")
    supervisor_pid: int | None = None
    supervisor_start_time: float | None = None
    host: str
    owner: str | None = Field(None, description="the watcher that runs it: host:pid:start")
    inbox_path: str = Field(description="where the prompt was dropped, relative to the root")
    processed_path: str | None = Field(None, description="where the prompt went, relative to root")
    workdir: str | None = None
    timeout_seconds: float | None = None
    stop_requested: Reason | None = Field(
        None, description="set before hopper signals the job: aborted, timeout or shutdown"
    )
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    duration_seconds: float | None = None
    session: str | None = Field(None, description="front matter `session`: the conversation name")
    session_id: str | None = Field(None, description="the agent's own session / thread id")
    result_path: str | None = Field(None, description="the agent's final message, in the run dir")
    usage: Usage | None = None
    turns: int | None = Field(None, description="model turns the agent reported")
    error_kind: str | None = Field(
        None,
        description="for agent_error: auth, rate_limit, overloaded, server, network, "
        "permission_denied or unknown",
    )
    permission_denials: list[str] = Field(
        default_factory=list, description="tool calls the agent's permission mode refused"
    )
    nudges: int | None = Field(
        None, description="check-loop nudges sent (resumes after a failed check)"
    )


class ExitStatus(BaseModel):
    """``runs/<id>/exit.json``, written once by the per-job supervisor."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    started: bool = Field(description="false if the job was never released to run")
    supervisor_pid: int | None = Field(None, description="who wrote this record")
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stop_signal_sent: bool = False
    leftovers_killed: int = 0
    error: str | None = None
    finished_at: datetime
