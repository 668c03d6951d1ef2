"""``hopper submit``: check a prompt as the watcher will, then put it into the inbox the
safe way (temp name, then rename) and print the job's name.

The check is the watcher's own admission (``core/admission.admit``) with this
config and the inbox sub-path the prompt goes to: a prompt the watcher would
refuse (bad TOML, an unknown key, an unknown agent, a bash job with nothing
to run …) is refused here, exit 2, with the reason the watcher would record
(file, line, fix), and nothing is written. A front-matter ``name`` names the
job and its inbox file however the prompt arrives (``--name`` wins over it).
``--wait`` and ``--follow`` then wait for that job like ``hopper wait`` and
``hopper logs -f`` (cli/submit_wait.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hopper.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_root_args, context, warn
from hopper.core import frontmatter
from hopper.core.jobid import prompt_stem, slugify
from hopper.core.prompt import FENCE, BadPrompt, PromptOptions, decode
from hopper.core.terminal import terminal_safe
from hopper.store.inbox_drop import drop_into
from hopper.store.layout import Layout, NotARealFolder

if TYPE_CHECKING:
    from hopper.config import Config

STDIN = "stdin"


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="write a checked prompt into the inbox and print its name")
    add_root_args(p)
    p.add_argument("file", nargs="?", default="-", help="prompt file, or - for stdin (default)")
    p.add_argument("--agent", help="agent to run it with (bash, claude, codex, …)")
    p.add_argument(
        "--name", help="job name (default: the front matter's name, else the file's stem)"
    )
    p.add_argument("--timeout", help="the job's wall-clock limit, e.g. 45m")
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
    p.add_argument("--json", action="store_true", help='print {"name", "path", "inbox_path"}')
    then = p.add_mutually_exclusive_group()
    then.add_argument(
        "--wait",
        action="store_true",
        help="wait for the job to end and exit with its outcome (like hopper wait)",
    )
    then.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the job's output until it ends, exit with its outcome (like hopper logs -f)",
    )
    p.add_argument(
        "--wait-timeout",
        type=float,
        metavar="SECONDS",
        help="with --wait or --follow: give up after this many seconds (exit 3)",
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
    return drop_into(layout, inbox_parts(subdir), stem, data)


def inbox_parts(subdir: str) -> tuple[str, ...]:
    """``--to``'s folders; ValueError unless it is a relative path inside the inbox."""
    sub = PurePosixPath(subdir).parts if subdir else ()
    if sub and (PurePosixPath(subdir).is_absolute() or ".." in sub or "\0" in subdir):
        raise ValueError(f"--to {subdir!r} must be a relative path inside the inbox")
    return sub


def refusal(
    data: bytes, source: str, inbox_rel: str, config: Config, edited: bool
) -> tuple[str | None, PromptOptions | None]:
    """Why the watcher would refuse ``data`` claimed from ``inbox_rel`` (None: it would
    admit it) and the prompt's options. The reason names ``source`` where the watcher
    names the inbox file; line numbers are ``source``'s unless ``edited`` (options merged
    from the command line moved them)."""
    from hopper.agents.registry import builtin_agents
    from hopper.core.admission import Admission, admit

    if len(data) > config.max_prompt_bytes:
        return (
            f"{source}: is {len(data)} bytes, over the limit of {config.max_prompt_bytes} "
            "bytes (shorten it, or raise max_prompt_bytes in the config)",
            None,
        )
    verdict = admit(
        data,
        job_id="submit-check",
        inbox_path=inbox_rel,
        config=config,
        agents=builtin_agents(config).keys(),
    )
    if isinstance(verdict, Admission):
        return None, verdict.start.options
    where = re.compile(rf"^{re.escape(inbox_rel)}(:\d+)?: ")
    match = where.match(verdict.detail)
    if match is None:
        return verdict.detail, None
    line = "" if edited or match.group(1) is None else match.group(1)
    named = f"{source} with the options given" if edited else source
    return f"{named}{line}: {verdict.detail[match.end() :]}", None


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    if args.wait_timeout is not None and not (args.wait or args.follow):
        warn("--wait-timeout goes with --wait or --follow")
        return EXIT_USAGE
    if args.session is not None:
        try:
            PromptOptions.model_validate({"session": args.session})
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            warn(f"--session {args.session!r}: {msg}")
            return EXIT_USAGE
    try:
        sub = inbox_parts(args.to)
    except ValueError as exc:
        warn(str(exc))
        return EXIT_USAGE
    if args.file == "-":
        source = STDIN
        data = sys.stdin.buffer.read()
        stem = datetime.now(UTC).strftime("prompt-%Y%m%d-%H%M%S")
    else:
        source = args.file
        try:
            data = Path(args.file).read_bytes()
        except OSError as exc:
            warn(f"{args.file}: cannot read: {exc.strerror}")
            return EXIT_USAGE
        stem = prompt_stem(Path(args.file).name).removesuffix(".md")
    overrides = _overrides(args)
    try:
        composed = compose(data, overrides)
    except (BadPrompt, tomllib.TOMLDecodeError) as exc:
        warn(f"{source}: cannot add the options given to this prompt: {exc}; nothing was submitted")
        return EXIT_USAGE
    inbox_rel = str(PurePosixPath("inbox", *sub, f"{args.name or stem}.prompt.md"))
    why, options = refusal(composed, source, inbox_rel, config, edited=composed != data)
    if why is not None or options is None:
        warn(
            f"{why}\nnothing was submitted: the watcher would refuse this prompt; fix it and "
            "submit it again"
        )
        return EXIT_USAGE
    stem = options.name or stem  # --name is in the options: it wins
    from hopper.cli import submit_wait

    before = submit_wait.run_dirs(layout) if args.wait or args.follow else frozenset()
    try:
        target = drop_into(layout, sub, slugify(stem) if "/" in stem else stem, composed)
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
    name = options.name or prompt_stem(target.name)
    rel = layout.relative(target)
    if args.json:
        print(json.dumps({"name": name, "path": str(target), "inbox_path": rel}))
    else:
        print(terminal_safe(f"submitted {name} ({rel})"), flush=True)
    submit_wait.warn_if_unserved(layout, config)
    if args.wait or args.follow:
        return submit_wait.until_ended(layout, target, rel, before, args.follow, args.wait_timeout)
    return EXIT_OK


def _overrides(args: argparse.Namespace) -> dict[str, frontmatter.Value]:
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
    return overrides
