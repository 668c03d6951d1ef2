"""``hopper retry ID|NAME``: run a finished job's prompt again, as a new job.

The new job's record carries ``retry_of`` (the old id); the old run is left
as it was. Prints the new prompt's inbox path; ``--json``: ``{"retry_of", "name",
"path", "inbox_path"}`` (the old job's id and name, the new prompt's path, absolute
and under the root).
``--env NAME`` gives back a front matter env value hopper withheld when the
job ended, from the caller's environment (never on the command line).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from hopper.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    add_json_arg,
    add_root_args,
    context,
    fail,
    find_job,
    print_json,
)
from hopper.core.terminal import terminal_safe
from hopper.store.resubmit import resubmit


def register(sub: Any) -> None:
    p = sub.add_parser("retry", help="submit a finished job's prompt again as a new job")
    add_root_args(p)
    p.add_argument("id", metavar="ID|NAME", help="job id, id prefix or name (any letter case)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="give the front matter env NAME again, its value taken from this environment "
        "(hopper withholds a job's env values when it ends); repeatable",
    )
    add_json_arg(p, '{"retry_of", "name", "path", "inbox_path"}')
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    absent = [name for name in args.env if name not in os.environ]
    if absent:
        return fail(
            f"--env {', '.join(absent)}: not set in this environment "
            f"(set it first: {absent[0]}=… hopper retry {args.id} --env {absent[0]})",
            EXIT_USAGE,
        )
    env = {name: os.environ[name] for name in args.env}
    record = find_job(layout, args.id)
    path = resubmit(layout, record.id, max_bytes=config.max_prompt_bytes, env=env)
    if args.json:
        print_json(
            {
                "retry_of": record.id,
                "name": record.name,
                "path": str(path),
                "inbox_path": path.relative_to(layout.root).as_posix(),
            }
        )
    else:
        print(terminal_safe(str(path)))
    return EXIT_OK
