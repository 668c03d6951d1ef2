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

WorkspaceKind = Literal["none", "folder", "worktree"]
AgentState = Literal["starting", "working", "waiting_for_input", "retrying", "api_error", "idle"]


class Usage(BaseModel):
    """Token and cost figures as the agent reported them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = Field(None, description="dollars; null when not known")
    tokens: int | None = Field(None, description="input, output, cache read and write together")
    cost_known: bool | None = Field(
        None, description="false: the agent reports tokens only and no [prices] row priced them"
    )
    cost_note: str | None = Field(None, description="why the cost is not known")
    model: str | None = Field(None, description="the model the agent reported (or was given)")


class Resources(BaseModel):
    """What the job's whole process tree used, as its supervisor measured it.

    Live while the job runs (refreshed with the heartbeat), final once it ends.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    cpu_seconds: float = Field(
        0.0, description="user + system CPU of the whole tree, exited processes included"
    )
    peak_rss_bytes: int = Field(
        0, description="the largest total RSS of the tree (a shared page counts in each process)"
    )
    output_bytes: int = Field(0, description="bytes the job wrote to job.log")
    rss_bytes: int | None = Field(None, description="while running: the tree's total RSS now")
    processes: int | None = Field(None, description="while running: processes in the tree now")


class JobHooks(BaseModel):
    """Per-job completion hooks from front matter (argv templates)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on_success: list[str] | None = None
    on_failure: list[str] | None = None
    on_finish: list[str] | None = None


class ContainerJob(BaseModel):
    """executor container: what the job runs in (docs/containers.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the container's name: hopper-<job id>")
    image: str
    mounts: list[str] = Field(
        default_factory=list, description="front matter `mounts` (-v syntax), as given"
    )
    network: str | None = Field(None, description="the engine's --network; null: its default")
    cpus: int | None = Field(None, description="the engine's --cpus; null: no limit")


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
    waiting: str | None = Field(
        None,
        description="queued: why hopper holds the job back (a budget reached: whose, how "
        "much was spent of what, when it resets, the key to raise); null otherwise",
    )
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
    memory_max_bytes: int | None = Field(
        None, description="memory_max: the tree's RSS limit (memory_limit); null = none"
    )
    output_max_bytes: int | None = Field(
        None, description="output_max: the job.log size limit (output_limit); null = none"
    )
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
    resources: Resources | None = Field(
        None, description="CPU, memory and output of the process tree (live while running)"
    )
    turns: int | None = Field(None, description="model turns the agent reported")
    max_cost_usd: float | None = Field(
        None, description="agent jobs: stop at this spend (budget_exceeded); null = no limit"
    )
    max_tokens: int | None = Field(
        None, description="agent jobs: stop at this many tokens (budget_exceeded); null = none"
    )
    error_kind: str | None = Field(
        None,
        description="for agent_error (and live, with agent_state api_error or retrying): "
        "auth, permission, billing, quota, rate_limit, overloaded, server, network, "
        "permission_denied or unknown",
    )
    agent_state: AgentState | None = Field(
        None,
        description="agent jobs, live (refreshed with the heartbeat): starting, working, "
        "waiting_for_input, retrying, api_error or idle; the last state once finished",
    )
    agent_detail: str | None = Field(
        None, description="what the agent state is about (the error, the refused permission …)"
    )
    last_activity_at: datetime | None = Field(
        None, description="agent jobs: when the agent last printed anything"
    )
    session_paused: bool = Field(
        False,
        description="on_error = pause: this job's failure holds its session's later prompts "
        "(<root>/sessions/<name>.paused)",
    )
    permission_denials: list[str] = Field(
        default_factory=list, description="tool calls the agent's permission mode refused"
    )
    nudges: int | None = Field(
        None, description="check-loop nudges sent (resumes after a failed check)"
    )
    priority: int = Field(0, description="higher starts first; ties by claim time")
    group: str | None = Field(
        None,
        description="scheduling group: front matter `group`, the route's, else the "
        "first inbox sub-folder; null at the top of the inbox",
    )
    after: list[str] = Field(
        default_factory=list, description="names or ids of jobs that must succeed first"
    )
    workspace: WorkspaceKind = Field(
        "none",
        description="none: run in workdir; folder: an empty dir per job; "
        "worktree: a git worktree of the repo at `repo`",
    )
    repo: str | None = Field(None, description="worktree: the git repository it branches from")
    ref: str | None = Field(None, description="worktree: the commit-ish it starts from")
    branch: str | None = Field(None, description="worktree: the job's branch (kept afterwards)")
    workspace_path: str | None = Field(
        None, description="folder / worktree: the directory the job ran in"
    )
    executor: Literal["local", "slurm", "container", "session"] = Field(
        "local",
        description="local: a supervised process on `host`; slurm: a Slurm batch job; "
        "container: a podman or docker container on `host`, under a supervisor; "
        'session: a message to a live interactive agent (mode = "interactive")',
    )
    slurm_job_id: str | None = Field(
        None, description="executor slurm: the Slurm job id (set before the job may start)"
    )
    slurm_resources: dict[str, int | str] = Field(
        default_factory=dict,
        description="executor slurm: cpus, mem, gres asked of Slurm (front matter, else [slurm])",
    )
    container: ContainerJob | None = Field(
        None, description="executor container: the image, mounts, network and cpus"
    )
    hooks: JobHooks | None = Field(None, description="the job's own completion hooks")
    retry_of: str | None = Field(
        None, description="hopper retry: the id of the finished job this one runs again"
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
    escaped: int = Field(0, description="processes still alive when the supervisor gave up killing")
    limit: Literal["memory", "output", "idle"] | None = Field(
        None,
        description="the limit that made the supervisor end the tree, if one did "
        "(idle: job.log did not grow for idle_timeout)",
    )
    resources: Resources | None = None
    error: str | None = None
    finished_at: datetime
