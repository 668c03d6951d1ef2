"""``hopper retry ID|NAME``: run a finished job's prompt again, as a new job.

The new job's record carries ``retry_of`` (the old id); the old run is left
as it was. Prints the new prompt's inbox path, like ``hopper submit``.
"""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import EXIT_OK, add_root_args, context
from hopper.store.resubmit import resubmit


def register(sub: Any) -> None:
    p = sub.add_parser("retry", help="submit a finished job's prompt again as a new job")
    add_root_args(p)
    p.add_argument("id", metavar="ID|NAME", help="job id, id prefix or name (any letter case)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    print(resubmit(layout, args.id, max_bytes=config.max_prompt_bytes))
    return EXIT_OK
