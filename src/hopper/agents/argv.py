"""The agent CLIs by driver-spec kind, and the argv of one turn. Pure: the standard
library and hopper.core.

Each CLI's own flags live in its module (agents/claude.py, codex.py, custom.py);
this one looks the CLI up and puts a turn in the job's container when it has one.
The prompt is never part of an argv: it goes on stdin (or, for a custom agent,
in the ``{prompt_file}`` it names).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hopper.agents.base import Cli
from hopper.agents.claude import CLAUDE
from hopper.agents.codex import CODEX
from hopper.agents.custom import CUSTOM
from hopper.core.mounts import Mount, MountMap

CLIS: dict[str, Cli] = {cli.kind: cli for cli in (CLAUDE, CODEX, CUSTOM)}


class UnknownKind(ValueError):
    """agent.spec.json names a kind of CLI this hopper does not know."""


def cli_for(spec: Mapping[str, Any]) -> Cli:
    """The CLI a driver spec (agent.spec.json) runs."""
    kind = spec.get("kind")
    cli = CLIS.get(kind) if isinstance(kind, str) else None
    if cli is None:
        raise UnknownKind(
            f"agent.spec.json in {spec.get('run_dir')}: unknown agent kind {kind!r} "
            f"(known: {', '.join(CLIS)}); it was written by another version of hopper: "
            "retry the job (hopper retry) to prepare it afresh"
        )
    return cli


def build_argv(spec: Mapping[str, Any], session_id: str | None, resume: bool) -> list[str]:
    """The CLI's argv for one run of the driver ``spec`` (see ``hopper.agents.drive``)."""
    return cli_for(spec).argv(spec, session_id, resume)


def turn_argv(
    spec: Mapping[str, Any], message: Path, session_id: str | None, resume: bool
) -> list[str]:
    """What the driver runs for one turn whose message is in ``message``: the CLI's argv,
    in the job's container when ``executor = "container"``."""
    argv = build_argv({**spec, "message_file": str(message)}, session_id, resume)
    container = spec.get("container")
    return in_container(argv, container) if container else argv


def in_container(
    argv: list[str], container: Mapping[str, Any], *, bare_program: bool = True
) -> list[str]:
    """``argv`` run in the job's container: the wrapper prefix, then ``argv`` with host
    paths translated through the job's mounts. A CLI found on the host by absolute path
    (not under a mount) is called by its bare name: the image has its own copy on PATH
    (unless not ``bare_program``: a ``check`` runs exactly what the prompt wrote)."""
    mmap = MountMap(tuple(Mount(str(h), str(c)) for h, c in container["mounts"]))
    inside = [mmap.translate(a) for a in argv]
    if bare_program and inside and inside[0] == argv[0] and argv[0].startswith("/"):
        inside[0] = os.path.basename(argv[0])
    return [*(str(a) for a in container["prefix"]), *inside]


def check_argv(spec: Mapping[str, Any], check: list[str]) -> list[str]:
    """What the driver runs for the job's ``check``: where the agent ran. In the job's
    container (same image, mounts, network, limits; its working directory the workdir's
    mount) when it has one: never on the host, where a script the contained agent wrote
    into the workdir would run as the watcher's user."""
    container = spec.get("container")
    return in_container(check, container, bare_program=False) if container else check
