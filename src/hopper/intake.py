"""From inbox file to queued (or failed) job: claim, read, parse, record.

Bad input never stops the watcher: a prompt that cannot run ends as a
failed job whose ``detail`` names the file, the line and the fix, and its
file goes to processed/ like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hopper.agents.base import Agent
from hopper.agents.registry import UnknownAgent, lookup
from hopper.clock import Clock
from hopper.config import Config, Route
from hopper.core import lifecycle, routing
from hopper.core import prompt as prompts
from hopper.core.jobid import prompt_stem
from hopper.core.lifecycle import Admitted, ExitFigures
from hopper.core.prompt import BadPrompt, PromptSpec
from hopper.core.record import JobHooks, JobRecord
from hopper.core.states import JobState, Reason
from hopper.executors.container import container_request
from hopper.executors.slurm_runner import slurm_request
from hopper.store import ledger, saferead
from hopper.store.claim import Claimed, claim, read_claim
from hopper.store.finalize import file_terminal
from hopper.store.jobfile import PROMPT_FILE
from hopper.store.layout import Layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    host: str
    owner: str  # host:pid:start of this watcher


def read_prompt(path: Path, limit: int) -> bytes:
    """The prompt's bytes, refusing anything but a regular file of at most ``limit`` bytes."""
    try:
        return saferead.read_bytes(path, limit, hint=_PROMPT_HINT)
    except FileNotFoundError:
        raise BadPrompt("vanished before it could be read") from None
    except saferead.UnreadableFile as exc:
        hint = "shorten it, or raise max_prompt_bytes in the config"
        raise BadPrompt(exc.message, hint=hint if exc.problem == "too_big" else exc.hint) from None


def printable(text: str) -> str:
    """``text`` with the bytes of a non-UTF-8 file name (surrogate escapes) as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_PROMPT_HINT = (
    "hopper never follows links or reads special files; "
    "copy the prompt into the inbox as a plain file"
)


class Intake:
    def __init__(
        self,
        layout: Layout,
        config: Config,
        agents: dict[str, Agent],
        clock: Clock,
        ident: Identity,
    ) -> None:
        self.layout = layout
        self.config = config
        self.agents = agents
        self.clock = clock
        self.ident = ident

    def take(self, path: Path) -> JobRecord | None:
        """Claim and admit one inbox file; None if another watcher got it first."""
        claimed = claim(self.layout, path, self.clock.now(), self.ident.host, self.ident.owner)
        if claimed is None:
            return None
        return self.admit(claimed)

    def resume_claim(self, run_dir: Path) -> JobRecord:
        """Recovery: the prompt was renamed in but job.json never written."""
        marker = read_claim(run_dir) or {}
        inbox_rel = marker.get("inbox_path") or f"inbox/{run_dir.name}.prompt.md"
        return self.admit(Claimed(run_dir.name, run_dir, inbox_rel))

    def admit(self, claimed: Claimed) -> JobRecord:
        now = self.clock.now()
        run_dir = claimed.run_dir
        # A name that is not UTF-8 arrives with surrogate escapes, which no
        # JSON record can hold: records carry a printable rendering instead.
        inbox_rel = printable(claimed.inbox_rel)
        ledger.note(
            run_dir,
            "claimed",
            now,
            inbox_path=inbox_rel,
            host=self.ident.host,
            owner=self.ident.owner,
        )
        base = JobRecord(
            id=claimed.job_id,
            name=prompt_stem(Path(inbox_rel).name),
            state=JobState.QUEUED,
            agent=self.config.default_agent,
            host=self.ident.host,
            owner=self.ident.owner,
            inbox_path=inbox_rel,
            created_at=now,
        )
        if inbox_rel != claimed.inbox_rel:
            return self.reject(
                run_dir,
                base,
                Reason.BAD_PROMPT,
                f"{inbox_rel}: the file name is not valid UTF-8 (shown with \\x escapes; "
                "the prompt is filed under that name); rename it to UTF-8 and submit it again",
            )
        try:
            spec = prompts.parse(read_prompt(run_dir / PROMPT_FILE, self.config.max_prompt_bytes))
        except BadPrompt as exc:
            return self.reject(run_dir, base, Reason.BAD_PROMPT, exc.describe(claimed.inbox_rel))
        settings = self._queued(base, spec)
        step = lifecycle.admitted(base, Admitted(now, settings))
        record = step.record
        try:
            resources = slurm_request(record.executor, spec, self.config.slurm)
            container = container_request(record.executor, spec, self.config.container, base.id)
        except BadPrompt as exc:
            return self.reject(run_dir, record, Reason.BAD_PROMPT, exc.describe(claimed.inbox_rel))
        if resources or container:
            step = lifecycle.admitted(
                base,
                Admitted(now, {**settings, "slurm_resources": resources, "container": container}),
            )
            record = step.record
        try:
            lookup(self.agents, record.agent)
        except UnknownAgent as exc:
            return self.reject(run_dir, record, Reason.UNKNOWN_AGENT, f"{claimed.inbox_rel}: {exc}")
        if record.agent == "bash":
            try:
                prompts.refuse_agent_only_keys(spec.options)
            except BadPrompt as exc:
                detail = exc.describe(claimed.inbox_rel)
                return self.reject(run_dir, record, Reason.BAD_PROMPT, detail)
        # Not fsynced: if a power cut loses it, prompt.md and claim.json are still
        # there and recovery completes the claim; the running record is durable.
        ledger.commit(run_dir, step, durable=False, crash="claim.after_record")
        log.info("job=%s state=queued name=%s agent=%s", record.id, record.name, record.agent)
        return record

    def _queued(self, base: JobRecord, spec: PromptSpec) -> dict[str, object]:
        """The job's settings: front matter wins over the inbox route, which wins
        over the config."""
        opts = spec.options
        timeout = spec.timeout_seconds
        folders = routing.subpath(base.inbox_path)
        match = routing.match_route(list(self.config.routes), folders)
        route = self.config.routes[match.key] if match else Route()
        values = match.values if match else {}

        def routed(value: str | None) -> str | None:
            return routing.fill(value, values) if value is not None else None

        workspace = routing.first(opts.workspace, route.workspace) or "none"
        workdir = routing.first(opts.workdir, routed(route.workdir), self.config.workdir)
        worktree = workspace == "worktree"
        return {
            "name": opts.name or base.name,
            "agent": routing.first(opts.agent, route.agent) or self.config.default_agent,
            "workdir": workdir,
            "timeout_seconds": routing.first(timeout, route.timeout, self.config.timeout),
            "retries": opts.retries if opts.retries is not None else self.config.retries,
            "session": opts.session,
            "priority": routing.first(opts.priority, route.priority) or 0,
            "group": routing.first(opts.group, routed(route.group), routing.group_of(folders)),
            "after": list(opts.after),
            "retry_of": opts.retry_of,
            "workspace": workspace,
            "repo": workdir if worktree else None,
            "ref": routing.first(opts.ref, routed(route.ref)) if worktree else None,
            "branch": opts.branch if worktree else None,
            "memory_max_bytes": spec.limit_bytes("memory_max", self.config.memory_max),
            "output_max_bytes": spec.limit_bytes("output_max", self.config.output_max),
            "executor": routing.first(opts.executor, route.executor) or self.config.executor,
            "hooks": JobHooks(
                on_success=opts.on_success,
                on_failure=opts.on_failure,
                on_finish=opts.on_finish,
            )
            if (opts.on_success or opts.on_failure or opts.on_finish)
            else None,
        }

    def reject(self, run_dir: Path, record: JobRecord, reason: Reason, detail: str) -> JobRecord:
        """End a job that cannot run: terminal record, prompt filed under processed/."""
        now = self.clock.now()
        ledger.note(run_dir, "rejected", now, reason=reason, detail=detail)
        return self.file_terminal(run_dir, record, reason, detail, now, {"finished_at": now})

    def file_terminal(
        self,
        run_dir: Path,
        record: JobRecord,
        reason: Reason,
        detail: str,
        now: datetime,
        fields: Mapping[str, object],
    ) -> JobRecord:
        """End a job through store/finalize.py's terminal path and log it (hooks: Runner.ended).

        ``fields`` adds what the caller knows: ``finished_at``,
        ``duration_seconds`` and, together, ``exit_code`` and ``signal``.
        """
        finished = fields.get("finished_at", now)
        duration = fields.get("duration_seconds")
        assert isinstance(finished, datetime)
        assert duration is None or isinstance(duration, float)
        figures = None
        if "exit_code" in fields or "signal" in fields:
            code, sig = fields.get("exit_code"), fields.get("signal")
            assert (code is None or isinstance(code, int)) and (sig is None or isinstance(sig, int))
            figures = ExitFigures(code, sig)
        final = file_terminal(
            self.layout,
            run_dir,
            record,
            reason,
            detail,
            now,
            finished_at=finished,
            duration_seconds=duration,
            exit=figures,
        )
        log.log(
            logging.INFO if record.state is JobState.RUNNING else logging.WARNING,
            "job=%s state=%s->%s reason=%s detail=%s",
            record.id,
            record.state,
            final.state,
            reason,
            detail,
        )
        return final
