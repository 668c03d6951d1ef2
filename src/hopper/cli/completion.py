"""``hopper completion bash|zsh|fish``: a shell completion script, and the hidden
``hopper _complete-jobs [PREFIX]`` the scripts call for job ids and names.

The scripts are generated from hopper's own parser by shtab (a well-kept
generator: argparse sub-commands, bash, zsh and fish), so they follow every
command and option as they change; nothing here is written by hand but the
one hook: each argument that takes a job (metavar ``ID``…) completes from
``hopper _complete-jobs``, which reads the status index (``store/lookup.references``)
and is dispatched by ``cli/main.py`` before any parser is built.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hopper.cli.common import EXIT_FAILED, EXIT_OK, read_context

SHELLS = ("bash", "zsh", "fish")
COMPLETE_JOBS = "_complete-jobs"  # cli/main.py dispatches it before any parser
JOBS_COMMAND = f"hopper {COMPLETE_JOBS}"


def register(sub: Any) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    full: Callable[[], argparse.ArgumentParser] = args.full_parser  # cli/main.py gives it
    sys.stdout.write(script(full(), args.shell))
    return EXIT_OK


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` from ``parser`` (hopper's, with every command's
    own arguments); the arguments that take a job complete from ``hopper _complete-jobs``."""
    import shtab

    jobs = shtab.cmd(JOBS_COMMAND)
    for action in _actions(parser):
        if isinstance(action.metavar, str) and action.metavar.startswith("ID"):
            action.complete = jobs  # type: ignore[attr-defined]
    text: str = shtab.complete(parser, shell=shell)
    return text if text.endswith("\n") else text + "\n"


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _actions(child)


def complete_jobs(words: Sequence[str]) -> int:
    """``hopper _complete-jobs [--root DIR] [--config FILE] [PREFIX]``: one job id or
    name a line. Quiet on any error: a completion must never print into the prompt."""
    parser = argparse.ArgumentParser(prog=f"hopper {COMPLETE_JOBS}", add_help=False)
    parser.add_argument("--root")
    parser.add_argument("--config")
    parser.add_argument("prefix", nargs="?", default="")
    args, _ = parser.parse_known_args(words)
    try:
        found = _references(args)
    except Exception:
        # no root yet, an unreadable config or index: nothing to offer. A message on
        # stderr would land in the middle of the line being typed; the exit code says it.
        return EXIT_FAILED
    sys.stdout.write("".join(f"{ref}\n" for ref in found))
    return EXIT_OK


def _references(args: argparse.Namespace) -> list[str]:
    from hopper.store.lookup import references

    return references(read_context(args), args.prefix)
