"""``hopper.1``: the manual page, written from the argparse parser itself.

``python -m hopper.cli.manpage > hopper.1`` prints it; ./install.sh puts it
where ``man hopper`` finds it (``share/man/man1`` beside the ``bin`` that
holds the command). Every command, subcommand, option and argument comes from
the parser ``hopper`` runs (cli/main.py with every command's module loaded),
so the page cannot drift from the commands; the exit codes come from
cli/common.py. Written here rather than with argparse-manpage: that would be
a dependency outside the project's short list (and a build requirement for
every install) for what is a walk over the parser's actions.

The wheel ships a copy, man/hopper.1, as data that pip installs in the same
place (a build cannot run the parser: its environment lacks hopper's
dependencies); tests/test_manpage.py fails when that copy is not this
module's output (``python -m hopper.cli.manpage > man/hopper.1``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator

from hopper import __version__
from hopper.agents.npm import system_dir
from hopper.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE

SYSTEM_DIR = "<prefix>/share/hopper/agents"  # npm.system_dir, for any prefix
EXIT_MEANINGS = (
    (
        EXIT_OK,
        "success; hopper wait, hopper logs -f ID and hopper submit --wait/--follow: "
        "every job waited for succeeded",
    ),
    (
        EXIT_FAILED,
        "what was asked for failed (an unknown job, a failed check); a job "
        "waited for or followed failed or was aborted",
    ),
    (
        EXIT_USAGE,
        "usage error: a bad option or value, a prompt the watcher would refuse (nothing written)",
    ),
    (EXIT_TIMEOUT, "a --timeout ran out before the job(s) ended; the jobs go on"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl+C)"),
)
ENVIRONMENT = (
    ("HOPPER_ROOT", "the state root, when --root is not given (before the config's root)"),
    ("HOPPER_CONFIG", "the config file, when --config is not given"),
    ("XDG_STATE_HOME", "the default root is $XDG_STATE_HOME/hopper (~/.local/state/hopper)"),
    ("NO_COLOR", "hopper status prints no colour"),
    (
        "JOURNAL_STREAM",
        "set by systemd: hopper run prefixes its log lines with syslog "
        "priorities when it names stderr",
    ),
)
FILES = (
    ("~/.config/hopper/config.toml, /etc/hopper/config.toml", "the configuration"),
    ("ROOT/inbox/", "prompts to run: *.prompt.md, claimed by the watcher"),
    ("ROOT/runs/ID/", "one job: job.json, events.jsonl, job.log, exit.json"),
    ("ROOT/processed/", "the prompts of finished jobs"),
    ("ROOT/.hopper/watchers/", "one heartbeat file per watcher (hopper watchers)"),
)
_FONT = re.compile(r"\\f[BIRP]")
_USAGE_GROUP = re.compile(r"\[[^\]]*\]|\S+")


def escape(text: str) -> str:
    """``text`` safe in a roff line: backslashes and hyphens escaped, a leading dot or
    quote made literal (it would be read as a request)."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + out if out.startswith((".", "'")) else out


def render(parser: argparse.ArgumentParser, version: str = __version__) -> str:
    """The page for ``parser`` (hopper's full parser) as roff (man(7) macros)."""
    prog = parser.prog
    lines = [
        f'.TH {prog.upper()} 1 "" "{prog} {version}" "User Commands"',
        ".nh",  # no hyphenation: options and paths are typed as printed
        ".ad l",
        ".SH NAME",
        f"{prog} \\- {escape(_first_sentence(parser.description or ''))}",
        ".SH SYNOPSIS",
        f".B {prog}",
        "[\\fB\\-\\-version\\fR] \\fICOMMAND\\fR [\\fIoptions\\fR] [\\fIarguments\\fR]",
        ".SH DESCRIPTION",
        escape(parser.description or ""),
        "Prompts dropped into the root's inbox are claimed by a watcher",
        "(\\fBhopper run\\fR, usually a systemd service) and run as bash scripts,",
        "agent CLIs, containers or Slurm jobs; every other command reads or",
        "writes the same files. Each command takes \\fB\\-\\-help\\fR.",
        ".SH COMMANDS",
    ]
    for words, sub, summary in _commands(parser):
        lines += _command(words, sub, summary)
    lines.append(".SH EXIT STATUS")
    for code, meaning in EXIT_MEANINGS:
        lines += [".TP", f".B {code}", escape(meaning)]
    lines.append(".SH ENVIRONMENT")
    for name, meaning in ENVIRONMENT:
        lines += [".TP", f".B {name}", escape(meaning)]
    lines.append(".SH FILES")
    for path, meaning in FILES:
        lines += [".TP", f".I {escape(path)}", escape(meaning)]
    lines += [
        ".SH SEE ALSO",
        "The README and docs/ of the hopper source (contract, configuration, operations,",
        "observability); \\fBjournalctl\\fR(1) \\-u hopper for the watcher's log.",
    ]
    # `hopper agents install --system` names this installation's shared folder in its
    # help; the page is one file for every prefix that installs it (man/hopper.1).
    return ("\n".join(lines) + "\n").replace(escape(str(system_dir())), escape(SYSTEM_DIR))


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command and subcommand below ``parser``, depth first, with its help line."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            path = (*words, name)
            yield path, sub, helps.get(name, "")
            yield from _commands(sub, path)


def _command(words: tuple[str, ...], sub: argparse.ArgumentParser, summary: str) -> list[str]:
    usage = " ".join(sub.format_usage().split()).removeprefix("usage: ")
    # filled, so man wraps it to the terminal, but never inside one [option VALUE]
    groups = [escape(g).replace(" ", "\\ ") for g in _USAGE_GROUP.findall(usage)]
    lines = [f'.SS "{escape(" ".join(("hopper", *words)))}"', escape(summary) + ".", ".PP"]
    lines.append(" ".join(groups))
    formatter = sub._get_formatter()
    for action in sub._actions:
        if action.help == argparse.SUPPRESS or isinstance(
            action, argparse._SubParsersAction | argparse._HelpAction
        ):
            continue
        lines += [
            ".TP",
            _term(action),
            escape(formatter._expand_help(action) if action.help else ""),
        ]
    return lines


def _term(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"\\fI{escape(action.metavar or action.dest)}\\fR"  # type: ignore[arg-type]
    names = ", ".join(f"\\fB{escape(o)}\\fR" for o in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.choices is not None and action.metavar is None:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    return f"{names} \\fI{escape(str(metavar))}\\fR"


def _first_sentence(text: str) -> str:
    first = text.split(". ")[0].rstrip(".")
    return first[:1].lower() + first[1:]


def plain(page: str) -> str:
    """The page's text with its roff font escapes removed (for tests and greps)."""
    return _FONT.sub("", page).replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")


def main() -> int:
    from hopper.cli.main import COMMANDS, build_parser

    sys.stdout.write(render(build_parser(tuple(COMMANDS))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
