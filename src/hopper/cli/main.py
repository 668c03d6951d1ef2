"""``hopper``: one entry point, one module per command.

Exit codes: 0 success, 1 the thing asked for failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from hopper import __version__
from hopper.cli import (
    abort,
    agents,
    config,
    demo,
    doctor,
    events,
    inbox,
    logs,
    pause,
    priority,
    retry,
    run,
    schema,
    status,
    submit,
    usage,
    wait,
    watch,
    watchers,
    web,
)
from hopper.cli.common import EXIT_USAGE, fail
from hopper.errors import HopperError

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"hopper: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hopper", description="A job service with a filesystem API.")
    parser.add_argument("--version", action="version", version=f"hopper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (
        run,
        submit,
        status,
        logs,
        events,
        watch,
        usage,
        abort,
        retry,
        priority,
        pause,
        wait,
        inbox,
        demo,
        schema,
        config,
        doctor,
        agents,
        watchers,
        web,
    ):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Command | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return handler(args)
    except HopperError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
