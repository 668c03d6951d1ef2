"""Admission: a claimed prompt's bytes, its inbox path and the config -> a job, once.

Theory of operation. A prompt is read and parsed exactly once, when it is
claimed. :func:`admit` parses it, merges its front matter with the inbox
route and the config — the front matter wins over the route, which wins over
the config, key by key — and checks everything that can be checked without
touching the system: the agent is known, the Slurm resources are valid and
asked of Slurm, a container job has an image, a bash job uses no agent-only
keys, there is a script or a task to run. It returns an :class:`Admission`
(the settings for job.json and the :class:`StartSpec` that start needs,
which the shell keeps as ``runs/<id>/admission.json``) or a :class:`Refusal`
naming the reason and the fix. Start never reads prompt.md again, so an
edited prompt.md or a parser that changed across an upgrade cannot change
what runs, and a prompt that parsed at claim cannot become ``bad_prompt`` at
start.

Pure: no files, no clock. The config comes in as the protocols below, which
``hopper.config.Config`` satisfies (core imports nothing outside core).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from hopper.core import prompt as prompts
from hopper.core import routing
from hopper.core.container_job import ContainerDefaults, container_request
from hopper.core.jobid import prompt_stem
from hopper.core.prompt import BadPrompt, PromptOptions, PromptSpec
from hopper.core.record import JobHooks
from hopper.core.slurm_resources import SlurmDefaults, slurm_request
from hopper.core.states import Reason


class RouteDefaults(Protocol):
    """``[routes."a/{b}"]``: what a prompt under that inbox sub-path gets by default."""

    @property
    def agent(self) -> str | None: ...
    @property
    def workdir(self) -> str | None: ...
    @property
    def workspace(self) -> Literal["none", "folder", "worktree"] | None: ...
    @property
    def ref(self) -> str | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def priority(self) -> int | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def executor(self) -> Literal["local", "slurm", "container"] | None: ...
    @property
    def mode(self) -> Literal["headless", "interactive"] | None: ...
    @property
    def max_cost_usd(self) -> float | None: ...
    @property
    def max_tokens(self) -> int | None: ...


class AgentDefaults(Protocol):
    """``[agents.NAME]``: what admission reads of an agent's table."""

    @property
    def max_cost_usd(self) -> float | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def argv(self) -> list[str] | None: ...
    @property
    def format(self) -> str: ...
    @property
    def mode(self) -> Literal["headless", "interactive"]: ...


@dataclass(frozen=True)
class _NoRoute:
    """No route matched: every route default is absent."""

    agent: str | None = None
    workdir: str | None = None
    workspace: Literal["none", "folder", "worktree"] | None = None
    ref: str | None = None
    group: str | None = None
    priority: int | None = None
    timeout: float | None = None
    executor: Literal["local", "slurm", "container"] | None = None
    mode: Literal["headless", "interactive"] | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None


NO_ROUTE = _NoRoute()


class AdmissionDefaults(Protocol):
    """The config keys admission reads (``hopper.config.Config`` has them all)."""

    @property
    def default_agent(self) -> str: ...
    @property
    def workdir(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def retries(self) -> int: ...
    @property
    def memory_max(self) -> int | None: ...
    @property
    def output_max(self) -> int | None: ...
    @property
    def executor(self) -> Literal["local", "slurm", "container"]: ...
    @property
    def routes(self) -> Mapping[str, RouteDefaults]: ...
    @property
    def agents(self) -> Mapping[str, AgentDefaults]: ...
    @property
    def slurm(self) -> SlurmDefaults: ...
    @property
    def container(self) -> ContainerDefaults: ...
    @property
    def max_cost_usd(self) -> float | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def prices(self) -> Mapping[str, object]: ...


class StartSpec(BaseModel):
    """What start needs of the prompt, fixed at claim: ``runs/<id>/admission.json``.

    ``options.env`` holds the prompt's ``env`` values, which may be secrets:
    the file is created mode 0600 and never copied into job.json, events or logs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    job_id: str
    options: PromptOptions
    body: str
    body_line: int
    has_front_matter: bool

    @classmethod
    def of(cls, job_id: str, spec: PromptSpec) -> StartSpec:
        return cls(
            job_id=job_id,
            options=spec.options,
            body=spec.body,
            body_line=spec.body_line,
            has_front_matter=spec.has_front_matter,
        )

    def prompt(self) -> PromptSpec:
        """The prompt as parsed at claim."""
        return PromptSpec(self.options, self.body, self.body_line, self.has_front_matter)


@dataclass(frozen=True)
class Admission:
    """A prompt admitted: the record's settings and what its start needs."""

    settings: Mapping[str, object]  # JobRecord fields (lifecycle.Admitted)
    start: StartSpec


@dataclass(frozen=True)
class Refusal:
    """A prompt that cannot run: why (``detail`` names the file and the fix)."""

    reason: Reason  # BAD_PROMPT or UNKNOWN_AGENT
    detail: str
    settings: Mapping[str, object] = field(default_factory=dict)  # what was merged, if any


def unknown_agent(name: str, known: Collection[str]) -> str:
    return f"unknown agent {name!r}; available: {', '.join(sorted(known))}"


def admit(
    data: bytes,
    *,
    job_id: str,
    inbox_path: str,
    config: AdmissionDefaults,
    agents: Collection[str],
) -> Admission | Refusal:
    """Admit the prompt ``data`` claimed from ``inbox_path`` (``inbox/…/x.prompt.md``).

    ``agents`` are the names of the agents this watcher can run.
    """
    try:
        spec = prompts.parse(data)
    except BadPrompt as exc:
        return Refusal(Reason.BAD_PROMPT, exc.describe(inbox_path))
    settings = settings_for(spec, inbox_path, config)
    agent = str(settings["agent"])
    try:
        settings = interactive(spec, settings, route_of(inbox_path, config), config)
    except BadPrompt as exc:
        return Refusal(Reason.BAD_PROMPT, exc.describe(inbox_path), settings)
    executor = str(settings["executor"])
    try:
        resources = slurm_request(executor, spec, config.slurm)
        container = container_request(executor, spec, config.container, job_id)
    except BadPrompt as exc:
        return Refusal(Reason.BAD_PROMPT, exc.describe(inbox_path), settings)
    if resources or container:
        settings = {**settings, "slurm_resources": resources, "container": container}
    if agent not in agents:
        return Refusal(
            Reason.UNKNOWN_AGENT, f"{inbox_path}: {unknown_agent(agent, agents)}", settings
        )
    try:
        runnable(spec, agent)
        followable(settings, agent, config)
    except BadPrompt as exc:
        return Refusal(Reason.BAD_PROMPT, exc.describe(inbox_path), settings)
    return Admission(settings, StartSpec.of(job_id, spec))


def followable(settings: Mapping[str, object], agent: str, config: AdmissionDefaults) -> None:
    """Raise :class:`BadPrompt` for a spending limit hopper could not follow.

    ``max_tokens`` needs an agent that reports usage (not a custom agent with
    ``format = "text"``); ``max_cost_usd`` needs a cost: Claude reports its own,
    any other agent's tokens need ``[agents.NAME] model`` and a ``[prices]`` row for it.
    A limit that would be ignored is refused rather than left to surprise.
    """
    cost, tokens = settings.get("max_cost_usd"), settings.get("max_tokens")
    if cost is None and tokens is None:
        return
    table = config.agents.get(agent)
    custom = table is not None and table.argv is not None
    fmt = table.format if custom and table is not None else agent
    if fmt == "text":
        key = "max_cost_usd" if cost is not None else "max_tokens"
        raise BadPrompt(
            f"{key} cannot be followed: agent {agent!r} prints text and reports no usage",
            hint=f'give [agents.{agent}] format = "claude-jsonl" or "codex-jsonl", or drop {key}',
        )
    if cost is None or fmt in ("claude", "claude-jsonl"):
        return  # Claude's stream carries its cost
    model = table.model if table is not None else None
    if model is None:
        raise BadPrompt(
            f"max_cost_usd cannot be followed: agent {agent!r} reports tokens only and "
            "names no model to price",
            hint=f'set [agents.{agent}] model and its [prices."<model>"] row, or use '
            "max_tokens instead",
        )
    if model not in config.prices:
        raise BadPrompt(
            f"max_cost_usd cannot be followed: agent {agent!r} reports tokens only and "
            f"model {model!r} has no price",
            hint=f'add [prices."{model}"] input_per_mtok = …, output_per_mtok = … to the '
            "config, or use max_tokens instead",
        )


def runnable(spec: PromptSpec, agent: str) -> None:
    """Raise :class:`BadPrompt` unless the body gives ``agent`` something to run.

    A bash job runs its script and cannot be nudged (no agent-only keys);
    any other agent needs a task below the front matter.
    """
    if agent == "bash":
        prompts.refuse_agent_only_keys(spec.options)
        prompts.bash_script(spec)
    elif not spec.body.strip():
        raise BadPrompt("has no prompt text", hint="write the task below the front matter")


SESSION_EXECUTOR = "session"  # the executor of interactive agent jobs (executors/session.py)


def route_of(inbox_path: str, config: AdmissionDefaults) -> RouteDefaults:
    match = routing.match_route(list(config.routes), routing.subpath(inbox_path))
    return config.routes[match.key] if match else NO_ROUTE


def interactive(
    spec: PromptSpec, settings: dict[str, object], route: RouteDefaults, config: AdmissionDefaults
) -> dict[str, object]:
    """An agent job in ``mode = "interactive"`` (front matter, else the route, else
    ``[agents.NAME] mode``) runs as a message to a live session on this host: its
    executor is the session host's. Raises :class:`BadPrompt` for one that asks for
    another executor."""
    agent = str(settings["agent"])
    table = config.agents.get(agent)
    mode = routing.first(spec.options.mode, route.mode, table.mode if table else None)
    if mode != "interactive" or agent == "bash":
        return settings
    if settings["executor"] != "local":
        raise BadPrompt(
            f'mode = "interactive" runs the agent in a terminal on this host, not with '
            f"executor {settings['executor']!r}",
            hint='drop the executor key, or use mode = "headless"',
        )
    # The host follows the turn's tokens from the session log, which carries no cost:
    # max_cost_usd needs [agents.NAME] model and its [prices] row.
    cost = settings.get("max_cost_usd")
    model = table.model if table is not None else None
    if cost is not None and (model is None or model not in config.prices):
        if spec.options.max_cost_usd is not None:
            why = "names no model" if model is None else f"model {model!r} has no price"
            raise BadPrompt(
                f'max_cost_usd cannot be followed for mode = "interactive": the session log '
                f"reports tokens only and agent {agent!r} {why}",
                hint=f'set [agents.{agent}] model and add [prices."<model>"] input_per_mtok = '
                '…, output_per_mtok = … to the config, or use max_tokens, or mode = "headless"',
            )
        cost = None  # a route's, agent table's or the config's default it cannot price
    return {**settings, "executor": SESSION_EXECUTOR, "max_cost_usd": cost}


def settings_for(spec: PromptSpec, inbox_path: str, config: AdmissionDefaults) -> dict[str, object]:
    """The job's settings: the front matter wins over the inbox route, which wins
    over the config. Route values fill ``{name}`` from the matched folders."""
    opts = spec.options
    folders = routing.subpath(inbox_path)
    match = routing.match_route(list(config.routes), folders)
    route: RouteDefaults = config.routes[match.key] if match else NO_ROUTE
    values = match.values if match else {}

    def routed(value: str | None) -> str | None:
        return routing.fill(value, values) if value is not None else None

    workspace = routing.first(opts.workspace, route.workspace) or "none"
    workdir = routing.first(opts.workdir, routed(route.workdir), config.workdir)
    worktree = workspace == "worktree"
    hooks = (
        JobHooks(on_success=opts.on_success, on_failure=opts.on_failure, on_finish=opts.on_finish)
        if (opts.on_success or opts.on_failure or opts.on_finish)
        else None
    )
    agent = routing.first(opts.agent, route.agent) or config.default_agent
    return {
        "name": opts.name or prompt_stem(PurePosixPath(inbox_path).name),
        "agent": agent,
        "workdir": workdir,
        "timeout_seconds": routing.first(spec.timeout_seconds, route.timeout, config.timeout),
        "retries": opts.retries if opts.retries is not None else config.retries,
        "session": opts.session,
        "priority": routing.first(opts.priority, route.priority) or 0,
        "group": routing.first(opts.group, routed(route.group), routing.group_of(folders)),
        "after": list(opts.after),
        "retry_of": opts.retry_of,
        "workspace": workspace,
        "repo": workdir if worktree else None,
        "ref": routing.first(opts.ref, routed(route.ref)) if worktree else None,
        "branch": opts.branch if worktree else None,
        "memory_max_bytes": spec.limit_bytes("memory_max", config.memory_max),
        "output_max_bytes": spec.limit_bytes("output_max", config.output_max),
        "executor": routing.first(opts.executor, route.executor) or config.executor,
        "hooks": hooks,
        **limits_for(opts, route, agent, config),
    }


def limits_for(
    opts: PromptOptions, route: RouteDefaults, agent: str, config: AdmissionDefaults
) -> dict[str, object]:
    """``max_cost_usd`` and ``max_tokens``: the front matter, else the route, else
    ``[agents.NAME]``, else the config's. A bash job spends nothing: no defaults."""
    if agent == "bash":
        return {"max_cost_usd": opts.max_cost_usd, "max_tokens": opts.max_tokens}
    table = config.agents.get(agent)
    return {
        "max_cost_usd": routing.first(
            opts.max_cost_usd,
            route.max_cost_usd,
            table.max_cost_usd if table else None,
            config.max_cost_usd,
        ),
        "max_tokens": routing.first(
            opts.max_tokens,
            route.max_tokens,
            table.max_tokens if table else None,
            config.max_tokens,
        ),
    }
