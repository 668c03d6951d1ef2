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
    attempt: int = 1
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
    session_id: str | None = None
    result_path: str | None = None
    usage: Usage | None = None


class ExitStatus(BaseModel):
    """``runs/<id>/exit.json``, written once by the per-job supervisor."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    started: bool = Field(description="false if the job was never released to run")
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stop_signal_sent: bool = False
    leftovers_killed: int = 0
    error: str | None = None
    finished_at: datetime
