"""The config file (TOML): every key optional, unknown keys an error.

Looked up in order: ``--config``, ``$HOPPER_CONFIG``,
``$XDG_CONFIG_HOME/hopper/config.toml`` (``~/.config/hopper/config.toml``),
``/etc/hopper/config.toml``. No file at all is fine: the defaults run the demo.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from hopper.budget_config import Budgets
from hopper.configfile import CONFIG_LIMIT
from hopper.configfile import config_path as config_path  # re-exported: its old home
from hopper.core.durations import BadDuration, parse_duration, parse_positive_duration
from hopper.core.prompt import did_you_mean
from hopper.core.schedule import SlotLimits
from hopper.core.sizes import BadSize, parse_limit, parse_size
from hopper.core.slurm_resources import ResourceError, resource_args
from hopper.errors import ConfigError
from hopper.store.saferead import UnreadableFile, read_text


def _seconds(value: object) -> object:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return parse_duration(value)  # finite, not negative, at most a year
        except BadDuration as exc:
            raise ValueError(str(exc)) from None
    return value


def _positive_seconds(value: object) -> object:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return parse_positive_duration(value)
        except BadDuration as exc:
            raise ValueError(str(exc)) from None
    return value


# A duration ("90s", "45m", a number of seconds): finite, 0 or more.
Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0, allow_inf_nan=False)]
# A limit that fires when reached (timeouts): more than 0; leave the key out for none.
PositiveSeconds = Annotated[
    float, BeforeValidator(_positive_seconds), Field(gt=0, allow_inf_nan=False)
]


def _limit(value: object) -> object:
    if value is None or isinstance(value, str | int | float):
        try:
            return parse_limit(value)
        except BadSize as exc:
            raise ValueError(str(exc)) from None
    return value


# A size limit in bytes ("512M", "6G", a number of bytes); "none" for no limit.
SizeLimit = Annotated[int | None, BeforeValidator(_limit)]


def _size(value: object) -> object:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return parse_size(value)
        except BadSize as exc:
            raise ValueError(str(exc)) from None
    return value


# A size in bytes ("64K", a number of bytes), 0 or more; never "none".
Size = Annotated[int, BeforeValidator(_size), Field(ge=0)]


# A spending limit in dollars (more than 0) and one in tokens (1 or more).
Dollars = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Tokens = Annotated[int, Field(ge=1)]
PerMtok = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PriceRow(BaseModel):
    """``[prices."<model>"]``: dollars per million tokens, for agents that report only
    tokens (Codex, custom agents). Cache reads and writes cost as much as input unless set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: PerMtok
    output_per_mtok: PerMtok
    cache_read_per_mtok: PerMtok | None = None
    cache_write_per_mtok: PerMtok | None = None


class AgentConfig(BaseModel):
    """``[agents.NAME]``: how to run one agent (claude, codex, or one defined here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bin: str | None = Field(None, description="the CLI; default: on PATH, else tools/agents")
    args: list[str] = Field(default_factory=list, description="extra arguments, appended")
    env: dict[str, str] = Field(default_factory=dict, description="added to the agent's env")
    permission_mode: str | None = Field(None, description="claude --permission-mode")
    sandbox: Literal["read-only", "workspace-write", "danger-full-access", "bypass"] | None = Field(
        None, description="codex -s; bypass = no sandbox, no approvals"
    )
    model: str | None = None
    api_retries: int = Field(2, ge=0, le=20, description="reruns after rate_limit/network errors")
    retry_backoff: Seconds = Field(2.0, description="before the first rerun; doubles")
    idle_timeout: PositiveSeconds | None = Field(
        None, description="no output for this long: on_idle"
    )
    on_idle: Literal["abort", "nudge"] = Field(
        "abort", description="after idle_timeout: stop the job, or resume it with a nudge"
    )
    on_error: Literal["fail", "retry", "pause"] = Field(
        "retry",
        description="an API error: rerun retryable kinds (retry), fail, or fail and hold "
        "the session's later prompts (pause)",
    )
    on_dead: Literal["fail", "resume"] = Field(
        "fail", description="the CLI died without a result: fail, or resume the session"
    )
    max_cost_usd: Dollars | None = Field(
        None, description="its jobs stop at this spend (budget_exceeded); see docs/budgets.md"
    )
    max_tokens: Tokens | None = Field(
        None, description="this agent's jobs stop at this many tokens (budget_exceeded)"
    )
    argv: list[str] | None = Field(None, description="custom agent: argv template")
    format: Literal["text", "claude-jsonl", "codex-jsonl"] = "text"
    stdin: bool = Field(True, description="custom agent: the prompt on stdin")
    mode: Literal["headless", "interactive"] = Field(
        "headless",
        description="headless: one run of the CLI per job; interactive: the CLI lives in a "
        "terminal hopper holds, and each job is a message typed into it (docs/agents.md)",
    )
    session_idle: PositiveSeconds = Field(
        300.0, description="interactive: a session with no message for this long ends"
    )
    session_max: PositiveSeconds = Field(
        86400.0, description="interactive: a session ends at this age"
    )


class Limits(BaseModel):
    """``[limits]``: slots per agent and per group, under the global ``max_parallel``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_default: int = Field(
        1, ge=1, description="jobs of one agent at once (agents not listed; bash: max_parallel)"
    )
    agents: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="per agent: claude = 2, bash = 8 …"
    )
    group_default: int | None = Field(
        None, ge=1, description="jobs of one group at once (groups not listed); none: no limit"
    )
    groups: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="per group (inbox sub-folder or `group =`)"
    )


Executor = Literal["local", "slurm", "container"]


def _slurm_resource(key: str) -> object:
    def check(value: object) -> object:
        if value is None:
            return value
        try:
            resource_args({key: value})
        except ResourceError as exc:
            raise ValueError(str(exc)) from None
        return value

    return BeforeValidator(check)


class SlurmConfig(BaseModel):
    """``[slurm]``: how jobs with ``executor = "slurm"`` are submitted; see docs/slurm.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = Field(None, description="sbatch --partition; none: the cluster's")
    args: list[str] = Field(
        default_factory=list,
        description='extra sbatch options, one argv element each: ["--account=lab", "--qos=hi"]',
    )
    cpus: Annotated[int | None, _slurm_resource("cpus")] = Field(
        None, description="default --cpus-per-task (front matter `cpus` wins)"
    )
    mem: Annotated[int | str | None, _slurm_resource("mem")] = Field(
        None, description="default --mem: megabytes, or 512M, 4G (front matter `mem` wins)"
    )
    gres: Annotated[str | None, _slurm_resource("gres")] = Field(
        None, description="default --gres, e.g. gpu:1 (front matter `gres` wins)"
    )
    poll_interval: Seconds = Field(
        2.0, gt=0, description="how often squeue is asked about running Slurm jobs (one call)"
    )
    command_timeout: Seconds = Field(
        60.0,
        gt=0,
        description="the deadline of one sbatch / squeue / scancel / scontrol call, run off "
        "the watcher's loop; a call past it is killed",
    )

    def sbatch_extra(self) -> list[str]:
        """The operator's sbatch options: the partition, then ``args``."""
        return ([f"--partition={self.partition}"] if self.partition else []) + list(self.args)


class ContainerConfig(BaseModel):
    """``[container]``: how jobs with ``executor = "container"`` run; see docs/containers.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        min_length=1,
        description='the engine\'s argv prefix, e.g. ["podman", "--runtime", "runc"]; '
        "default: podman if on PATH, else docker",
    )
    run_args: list[str] = Field(
        default_factory=list,
        description="extra arguments for `run`, one argv element each, before the image",
    )
    image: str | None = Field(None, description="default image (front matter `image` wins)")
    command_timeout: Seconds = Field(
        60.0,
        gt=0,
        description="the deadline of one engine call (image check, inspect, rm), run off the "
        "watcher's loop; a call past it is killed and costs only its job",
    )


class Route(BaseModel):
    """``[routes."owner/repo/{branch}"]``: defaults for prompts dropped under that sub-path.

    ``{name}`` segments of the key match any one folder; their values fill
    ``{name}`` in the string values below (``ref = "{branch}"``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str | None = None
    workdir: str | None = None
    workspace: Literal["none", "folder", "worktree"] | None = None
    ref: str | None = None
    group: str | None = None
    priority: int | None = None
    timeout: PositiveSeconds | None = None
    executor: Executor | None = None
    mode: Literal["headless", "interactive"] | None = None
    max_cost_usd: Dollars | None = None
    max_tokens: Tokens | None = None


class Hooks(BaseModel):
    """``[hooks]``: argv templates run after a job is finalized, and a webhook."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on_success: list[str] | None = None
    on_failure: list[str] | None = None
    on_finish: list[str] | None = None
    on_budget: list[str] | None = Field(
        None,
        description="run once when a budget is reached (per scope and period, across "
        "watchers); ${budget.scope}, ${budget.reason} … (docs/budgets.md)",
    )
    webhook: str | None = Field(
        None,
        pattern=r"^https?://",
        description="POSTed the job's record, outcome, log and result; and "
        '"event": "budget_reached" once per budget reached',
    )
    webhook_secret: SecretStr | None = Field(
        None, description="signs each POST (X-Hopper-Signature); never logged"
    )
    webhook_secret_file: str | None = Field(
        None,
        description="an absolute path: the secret, read at each delivery (a rotated file is used)",
    )
    webhook_attempts: int = Field(5, ge=1, le=20, description="tries per delivery")
    webhook_backoff: Seconds = Field(
        2.0, description="before the second try; doubles (at most 5 minutes)"
    )
    webhook_log_tail: Size = Field(
        64 << 10, le=1 << 20, description="bytes of job.log's end sent; 0: none"
    )
    webhook_result_max: Size = Field(
        64 << 10, le=1 << 20, description="bytes of result.md sent; 0: none"
    )
    timeout: Seconds = Field(60.0, gt=0)

    @field_validator("webhook_secret_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("/", "~")):
            raise ValueError(f"{value!r} must be an absolute path (or start with ~/)")
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> Hooks:
        if self.webhook_secret is not None and self.webhook_secret_file is not None:
            raise ValueError("set webhook_secret or webhook_secret_file, not both")
        return self


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str | None = Field(None, description="state root; --root and $HOPPER_ROOT win")
    default_agent: str = Field("claude", description="agent for prompts that name none")
    max_parallel: int = Field(4, ge=1, description="jobs running at once")
    workdir: str | None = Field(None, description="default working directory; else the run dir")
    timeout: PositiveSeconds | None = Field(None, description="default wall-clock limit per job")
    kill_grace: Seconds = Field(10.0, description="between the stop signal and SIGKILL")
    memory_max: SizeLimit = Field(
        6 << 30, description="default limit on a job's process tree RSS (memory_limit); none: off"
    )
    output_max: SizeLimit = Field(
        100 << 20, description="default limit on a job's job.log size (output_limit); none: off"
    )
    sample_interval: Seconds = Field(
        1.0, gt=0, description="how often a job's supervisor measures CPU, memory and output"
    )
    heartbeat_interval: Seconds = Field(5.0, gt=0)
    heartbeat_rate: float = Field(
        40.0,
        gt=0,
        description="at most this many running jobs' heartbeats a second per watcher: with "
        "more jobs running than heartbeat_rate x heartbeat_interval, each job's heartbeat "
        "comes every running/heartbeat_rate seconds (at most host_dead_after/2)",
    )
    host_dead_after: Seconds = Field(
        60.0,
        gt=0,
        description="another host with no watcher heartbeat (and jobs with no pulse) this "
        "long is dead: a survivor takes over its jobs; see docs/scale-out.md",
    )
    rescan_interval: Seconds = Field(5.0, gt=0, description="full inbox rescan period")
    settle: Seconds = Field(
        1.0,
        description="a prompt written in place (not renamed in) is claimed once it has not "
        "changed for this long and no process holds it open for writing",
    )
    reconcile_interval: Seconds = Field(
        30.0, gt=0, description="how often half-done claims and orphaned jobs are recovered"
    )
    poll_interval: Seconds = Field(0.25, gt=0, description="ABORT / exit check period")
    max_prompt_bytes: int = Field(1 << 20, ge=1)
    retries: int = Field(0, ge=0, le=100, description="extra attempts for a job that fails")
    retry_backoff: Seconds = Field(10.0, description="wait before a retry; doubles each time")
    on_stop: Literal["abort", "wait", "detach"] = Field(
        "abort",
        description="SIGTERM: abort running jobs, wait for them, or detach (leave them "
        "running for the next watcher to adopt)",
    )
    stop_timeout: Seconds = Field(
        300.0, description="on_stop = wait: how long before detaching from what still runs"
    )
    env: dict[str, str] = Field(default_factory=dict, description="added to every job's env")
    max_cost_usd: Dollars | None = Field(
        None, description="default per agent job: stop at this spend (budget_exceeded)"
    )
    max_tokens: Tokens | None = Field(
        None, description="default per agent job: stop at this many tokens (budget_exceeded)"
    )
    prices: dict[str, PriceRow] = Field(
        default_factory=dict,
        description='[prices."<model>"]: dollars per million tokens; see docs/budgets.md',
    )
    agents: dict[str, AgentConfig] = Field(
        default_factory=dict, description="per-agent settings; see docs/agents.md"
    )
    limits: Limits = Field(default_factory=Limits, description="slots per agent and group")
    dependency_timeout: Seconds = Field(
        3600.0, description="an `after` name that never appears fails the job after this long"
    )
    executor: Executor = Field(
        "local",
        description="where jobs run: local (a supervised process), slurm (sbatch) or "
        "container (podman / docker)",
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig, description="executor = slurm")
    container: ContainerConfig = Field(
        default_factory=ContainerConfig, description="executor = container"
    )
    routes: dict[str, Route] = Field(
        default_factory=dict, description="inbox sub-path -> defaults; see docs/scheduling.md"
    )
    hooks: Hooks = Field(
        default_factory=lambda: Hooks(), description="completion hooks; see docs/scheduling.md"
    )
    budgets: Budgets = Field(
        default_factory=lambda: Budgets(),
        description="spend limits per scope (all, group, agent, session) and period; "
        "see docs/budgets.md",
    )

    def slot_limits(self) -> SlotLimits:
        """The scheduler's limits: ``max_parallel`` with the ``[limits]`` table."""
        return SlotLimits(
            max_parallel=self.max_parallel,
            agents=self.limits.agents,
            agent_default=self.limits.agent_default,
            groups=self.limits.groups,
            group_default=self.limits.group_default,
        )


def load_config(cli: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate the config; raises :class:`ConfigError` naming the file and key."""
    env = os.environ if env is None else env
    path = config_path(cli, env)
    if path is None:
        return Config()
    try:
        # A link to the config is fine (config management makes them); a FIFO or
        # a huge file is not: resolve, then read it like any file hopper did not write.
        raw = tomllib.loads(read_text(path.resolve(), CONFIG_LIMIT))
    except FileNotFoundError:
        raise ConfigError(
            "no such config file", path=path, hint="create it, or drop --config / $HOPPER_CONFIG"
        ) from None
    except UnreadableFile as exc:
        raise ConfigError(
            f"cannot be read as TOML: it {exc.message}",
            path=path,
            hint="the config is a UTF-8 TOML text file",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    except RecursionError:
        raise ConfigError("not valid TOML: nested too deeply", path=path) from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            keys = known_keys(err["loc"][:-1])
            near = did_you_mean(str(err["loc"][-1]), keys)
            raise ConfigError(
                f"unknown key {key!r}{near}", path=path, hint=f"known keys: {', '.join(keys)}"
            ) from None
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"key {key!r}: {msg}", path=path) from None


def known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``loc`` takes (``("budgets", "groups", "app")`` ->
    BudgetLimits' keys): the model reached by following ``loc`` through the
    fields, a dict's key stepping into its values."""
    model: type[BaseModel] = Config
    annotation: object = Config
    for part in loc:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            field = model.model_fields.get(str(part))
            if field is None:
                break
            annotation = field.annotation
        else:  # a dict (or a list): its values' model
            args = [a for a in get_args(annotation) if a is not type(None)]
            annotation = args[-1] if args else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        model = annotation
    return list(model.model_fields)
