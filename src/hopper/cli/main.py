"""``hopper``: one entry point, one module per command.

The command table below names each command's module and its one-line help, so
``hopper --help`` and ``hopper status`` import only what they run: the chosen
command's module registers its own arguments; every other command is listed
from the table (tests/test_cli_main.py checks the table against the modules).

Exit codes (cli/common.py; the table in README.md): 0 success, 1 the thing asked
for failed (or a job waited for did not succeed), 2 usage error, 3 a ``--timeout``
ran out, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from hopper import __version__
from hopper.errors import HopperError

Command = Callable[[argparse.Namespace], int]


class Entry(NamedTuple):
    module: str  # under hopper.cli; its register(sub) adds this command (and its siblings)
    help: str


COMMANDS: dict[str, Entry] = {
    "run": Entry("run", "run the watcher in the foreground"),
    "submit": Entry("submit", "write a checked prompt into the inbox and print its name"),
    "status": Entry("status", "show jobs (all, or the ones named)"),
    "logs": Entry("logs", "print (or follow) a job's job.log, or every running job's"),
    "events": Entry("events", "print (or follow) a job's events.jsonl"),
    "watch": Entry("watch", "a live view: status bar and the selected job's output"),
    "usage": Entry("usage", "sum the tokens and cost agents reported"),
    "budgets": Entry("budgets", "each budget: limit, spent this period, held jobs, reset time"),
    "abort": Entry("abort", "cancel a queued or running job"),
    "sessions": Entry("sessions", "list the live interactive sessions; close one"),
    "attach": Entry("attach", "put your terminal on a live agent's terminal"),
    "interrupt": Entry("interrupt", "interrupt a live session's turn (the session lives on)"),
    "retry": Entry("retry", "submit a finished job's prompt again as a new job"),
    "prune": Entry("prune", "remove finished jobs older than a given age"),
    "priority": Entry("priority", "change a queued job's priority (higher starts first)"),
    "pause": Entry("pause", "stop starting queued jobs (all, or one group); running jobs finish"),
    "resume": Entry("pause", "remove the PAUSE marker (all, or one group)"),
    "wait": Entry("wait", "wait until jobs end; exit 1 if any failed"),
    "inbox": Entry("inbox", "inbox housekeeping (init: make the routed folders)"),
    "demo": Entry("demo", "run three sample jobs on the root and show the results"),
    "schema": Entry("schema", "print the JSON Schema of job.json"),
    "config": Entry("config", "check or show the configuration"),
    "doctor": Entry("doctor", "check the root, the config and the environment"),
    "agents": Entry("agents", "list the agents and their CLIs; install the CLIs"),
    "watchers": Entry("watchers", "list the watchers serving this root (their heartbeats)"),
    "web": Entry("web", "serve the web dashboard (needs the 'web' extra)"),
    "completion": Entry("completion", "print a shell completion script (bash, zsh or fish)"),
}
# Hidden: the job ids and names the completion scripts offer (cli/completion.py).
COMPLETE_JOBS = "_complete-jobs"  # the same as completion.COMPLETE_JOBS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        from hopper.cli.common import EXIT_USAGE, fail  # the error path only: it loads config

        self.print_usage(sys.stderr)
        raise SystemExit(fail(message, EXIT_USAGE))


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option (the top level has
    only flags without values: ``-h``, ``--help``, ``--version``)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


ROOT_OPTIONS = ("--root", "--config")  # every command's (cli/common.py add_root_args)


def hoist_root_options(argv: Sequence[str]) -> list[str]:
    """``hopper --root R status`` read as ``hopper status --root R``: ``--root`` and
    ``--config`` given before the command word move to the end (before a ``--``), where
    the command's own parser (the innermost, for ``inbox init``) takes them. Given
    after the command as well, that one wins, as the later of a repeated option."""
    moved: list[tuple[str, list[str]]] = []  # (option, its words)
    i = 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name not in ROOT_OPTIONS:
            break
        width = 1 if "=" in argv[i] else 2
        if i + width > len(argv):
            break  # `hopper --root`: argparse says what is missing
        moved.append((name, list(argv[i : i + width])))
        i += width
    rest = list(argv[i:])
    end = rest.index("--") if "--" in rest else len(rest)
    given = {word.split("=", 1)[0] for word in rest[:end]}
    hoisted = [word for name, words in moved if name not in given for word in words]
    return rest[:end] + hoisted + rest[end:]


def unknown_command(argv: Sequence[str]) -> str:
    """The error for a command word that names no command, with the closest one
    (``hopper stauts``: did you mean 'status'?); ``""`` if the word is a command."""
    from difflib import get_close_matches

    word = next((a for a in argv if a == "--" or not a.startswith("-")), None)
    if word is None or word == "--" or word in COMMANDS:
        return ""
    close = get_close_matches(word, list(COMMANDS), n=1)
    if close:
        return f"unknown command {word!r}; did you mean {close[0]!r}?"
    return f"unknown command {word!r}; the commands: {', '.join(COMMANDS)} (hopper --help)"


def build_parser(full: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; the commands named in ``full`` get their own arguments (their module
    is imported), every other command only its name and help."""
    parser = _Parser(
        prog="hopper",
        description="A job service with a filesystem API.",
        epilog="Every command takes --root ROOT and --config FILE, after the command or "
        "before it (hopper --root ROOT status). hopper COMMAND --help: its options.",
    )
    parser.add_argument("--version", action="version", version=f"hopper {__version__}")
    # for `hopper completion`: the parser with every command's arguments, built when asked
    parser.set_defaults(full_parser=lambda: build_parser(tuple(COMMANDS)))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = {COMMANDS[name].module for name in full}
    for name, entry in COMMANDS.items():
        if name in sub.choices:
            continue  # registered by its module together with a sibling (pause, resume)
        if entry.module in modules:
            importlib.import_module(f"hopper.cli.{entry.module}").register(sub)
        else:
            sub.add_parser(name, help=entry.help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == [COMPLETE_JOBS]:  # before any parser: a completion must be quick
        from hopper.cli.completion import complete_jobs

        return complete_jobs(words[1:])
    words = hoist_root_options(words)
    command = chosen_command(words)
    if command is None and (unknown := unknown_command(words)):
        from hopper.cli.common import EXIT_USAGE, fail

        return fail(unknown, EXIT_USAGE)
    parser = build_parser(() if command is None else (command,))
    args = parser.parse_args(words)
    handler: Command | None = getattr(args, "handler", None)
    if handler is None:
        from hopper.cli.common import EXIT_USAGE

        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return handler(args)
    except HopperError as exc:
        from hopper.cli.common import fail

        return fail(exc)
    except KeyboardInterrupt:
        from hopper.cli.common import EXIT_INTERRUPTED

        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
