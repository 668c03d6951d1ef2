"""What the dashboard may change, each exactly as the CLI does it.

Abort creates ``runs/<id>/ABORT``; pause and resume create and remove the
PAUSE marker; submit writes a prompt into the inbox under a temporary
dot-name and renames it into place (``cli/submit.py``'s :func:`drop`). The
watcher does the rest; the dashboard never writes job.json.

A submitted prompt is checked exactly as the watcher will check it
(``core/prompt.parse``), so a bad one is refused with the same reason, now,
rather than ending as a failed job later.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hopper.agents.registry import builtin_agents
from hopper.cli.submit import drop
from hopper.config import Config
from hopper.core import frontmatter
from hopper.core.jobid import slugify
from hopper.core.prompt import BadPrompt, PromptOptions, parse
from hopper.store import markers
from hopper.store.jobfile import ABORT_FILE
from hopper.store.layout import Layout, NotARealFolder
from hopper.store.markers import BadGroup, pause_path

SUBMIT_MAX_BYTES = 1 << 20
NOT_FRONT_MATTER = frozenset({"body", "to"})


class Refused(ValueError):
    """A request the dashboard will not carry out; ``status`` is the HTTP status."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def touch_marker(path: Path) -> None:
    """Create ``path`` if missing, never through a link (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise Refused(f"cannot create {path}: {exc.strerror}", status=409) from None
    os.close(fd)


def request_abort(layout: Layout, job_id: str) -> Path:
    marker = layout.run_dir(job_id) / ABORT_FILE
    touch_marker(marker)
    return marker


def set_pause(layout: Layout, paused: bool, group: str | None) -> Path:
    """``hopper pause`` / ``resume`` (``store/markers.set_pause``); Refused(409) when an
    inbox folder on the way is a link, or the marker cannot be made or removed."""
    try:
        marker, _ = markers.set_pause(layout, group, paused)
    except BadGroup as exc:
        raise Refused(str(exc)) from None
    except NotARealFolder as exc:
        raise Refused(exc.render(), status=409) from None
    except OSError as exc:
        where = pause_path(layout, group)
        raise Refused(f"{where}: cannot change the PAUSE marker: {exc.strerror}", 409) from None
    return marker


def submit(layout: Layout, config: Config, payload: object) -> Path:
    """Write the prompt ``payload`` describes into the inbox; its path. Raises Refused."""
    if not isinstance(payload, dict):
        raise Refused('the body must be a JSON object: {"body": "...", "agent": ..., ...}')
    body = payload.get("body")
    if not isinstance(body, str) or not body.strip():
        raise Refused('body: the prompt\'s text (for agent = "bash", the script) is required')
    to = payload.get("to") or ""
    if not isinstance(to, str):
        raise Refused("to: an inbox sub-folder name, as a string")
    options = front_matter(payload)
    agent = options.get("agent")
    if isinstance(agent, str):
        known = builtin_agents(config)
        if agent not in known:
            raise Refused(f"agent: unknown agent {agent!r}; available: {', '.join(sorted(known))}")
    data = (frontmatter.render(options) + body).encode()
    if len(data) > SUBMIT_MAX_BYTES:
        raise Refused(f"the prompt is {len(data)} bytes; the limit is {SUBMIT_MAX_BYTES}")
    try:
        parse(data)
    except BadPrompt as exc:
        raise Refused(exc.describe("the submitted prompt")) from None
    name = options.get("name")
    stem = name if isinstance(name, str) else datetime.now(UTC).strftime("web-%Y%m%d-%H%M%S")
    try:
        return drop(layout, data, slugify(stem), to)
    except ValueError as exc:
        raise Refused(str(exc).replace("--to", "to")) from None
    except NotARealFolder as exc:
        raise Refused(exc.render(), status=409) from None


def front_matter(payload: dict[str, Any]) -> dict[str, frontmatter.Value]:
    """The payload's front matter keys, checked for names and value types."""
    known = PromptOptions.model_fields
    out: dict[str, frontmatter.Value] = {}
    for key, value in payload.items():
        if key in NOT_FRONT_MATTER or value is None or value == "" or value == []:
            continue  # an empty form field means "the default"
        if key not in known:
            raise Refused(f"unknown key {key!r}; known keys: body, to, {', '.join(known)}")
        if key == "after" and isinstance(value, str):
            value = [v for v in re.split(r"[\s,]+", value) if v]
        if not frontmatter.renderable(value):
            raise Refused(
                f"{key}: a string, number, boolean, list of strings or table of strings, "
                f"not {type(value).__name__}"
            )
        out[key] = value
    return out
