"""``hopper submit``: put a prompt into the inbox the safe way (temp name, then rename)."""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from hopper.cli.common import EXIT_FAILED, EXIT_USAGE, add_root_args, context, warn
from hopper.core import frontmatter
from hopper.core.jobid import prompt_stem, slugify
from hopper.core.prompt import FENCE, BadPrompt, PromptOptions, decode
from hopper.core.terminal import terminal_safe
from hopper.store.inbox_drop import drop_into
from hopper.store.layout import Layout, NotARealFolder


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="write a prompt into the inbox and print its path")
    add_root_args(p)
    p.add_argument("file", nargs="?", default="-", help="prompt file, or - for stdin (default)")
    p.add_argument("--agent", help="agent to run it with (bash, claude, codex, …)")
    p.add_argument("--name", help="job name (default: the file's stem)")
    p.add_argument("--timeout", help="wall-clock limit, e.g. 45m")
    p.add_argument("--workdir", help="where the job runs")
    p.add_argument(
        "--session", help="conversation name: prompts of one session run in order, in one chat"
    )
    p.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="ID",
        help="start only after this job (name or id) succeeded; repeatable",
    )
    p.add_argument("--priority", type=int, help="higher starts first (default 0)")
    p.add_argument("--group", help="scheduling group (default: the inbox sub-folder)")
    p.add_argument(
        "--to", metavar="SUBDIR", default="", help="inbox sub-folder to drop it in (routes, groups)"
    )
    p.set_defaults(handler=handle)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    lines = text.split("\n")
    if lines and lines[0].rstrip() == FENCE:
        for i in range(1, len(lines)):
            if lines[i].rstrip() == FENCE:
                table = tomllib.loads("\n".join(lines[1:i]))
                return table, "\n".join(lines[i + 1 :])
    return {}, text


def compose(data: bytes, overrides: Mapping[str, frontmatter.Value]) -> bytes:
    """The prompt with ``overrides`` merged into its front matter."""
    if not overrides:
        return data
    text = decode(data)
    options, body = split_front_matter(text)
    options.update(overrides)
    return (frontmatter.render(options) + body).encode()


def drop(layout: Layout, data: bytes, stem: str, subdir: str = "") -> Path:
    """Write ``data`` to a temporary dot-name in the inbox, fsync, rename into place.

    Raises ValueError for a ``subdir`` that is not a path inside the inbox,
    ``NotARealFolder`` when a folder on the way is a link (nothing written); on
    any other error (a full disk, a read-only or unwritable inbox) the temporary
    file is removed and the ``OSError`` propagates: nothing is left behind.
    """
    sub = PurePosixPath(subdir).parts if subdir else ()
    if sub and (PurePosixPath(subdir).is_absolute() or ".." in sub or "\0" in subdir):
        raise ValueError(f"--to {subdir!r} must be a relative path inside the inbox")
    return drop_into(layout, sub, stem, data)


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    if args.session is not None:
        try:
            PromptOptions.model_validate({"session": args.session})
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            warn(f"--session {args.session!r}: {msg}")
            return EXIT_USAGE
    if args.file == "-":
        data = sys.stdin.buffer.read()
        stem = args.name or datetime.now(UTC).strftime("prompt-%Y%m%d-%H%M%S")
    else:
        path = Path(args.file)
        try:
            data = path.read_bytes()
        except OSError as exc:
            warn(f"{path}: cannot read: {exc.strerror}")
            return EXIT_USAGE
        stem = args.name or prompt_stem(path.name).removesuffix(".md")
    overrides: dict[str, frontmatter.Value] = {
        k: v
        for k, v in (
            ("agent", args.agent),
            ("name", args.name),
            ("timeout", args.timeout),
            ("workdir", args.workdir),
            ("session", args.session),
            ("group", args.group),
        )
        if v
    }
    if args.after:
        overrides["after"] = list(args.after)
    if args.priority is not None:
        overrides["priority"] = args.priority
    try:
        data = compose(data, overrides)
    except (BadPrompt, tomllib.TOMLDecodeError) as exc:
        warn(f"{args.file}: cannot add options to this prompt: {exc}")
        return EXIT_FAILED
    try:
        target = drop(layout, data, slugify(stem) if "/" in stem else stem, args.to)
    except ValueError as exc:
        warn(str(exc))
        return EXIT_USAGE
    except NotARealFolder as exc:
        warn(exc.render())
        return EXIT_FAILED
    except OSError as exc:
        where = exc.filename or layout.inbox
        warn(
            f"cannot write the prompt into {layout.inbox}: {exc.strerror or exc} ({where}); "
            "nothing was submitted: free space or fix the inbox's permissions, then submit again"
        )
        return EXIT_FAILED
    print(terminal_safe(str(target)))
    return 0
