"""``man hopper``: the page is written from the parser, so it lists every command,
subcommand and option hopper has, and man renders it without a warning."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hopper.cli import common
from hopper.cli.main import COMMANDS, build_parser
from hopper.cli.manpage import escape, plain, render


def full_parser() -> argparse.ArgumentParser:
    return build_parser(tuple(COMMANDS))


def subcommands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append(((*words, name), sub))
                out += subcommands(sub, (*words, name))
    return out


def test_the_page_lists_every_command_and_every_option() -> None:
    parser = full_parser()
    page = render(parser)
    text = plain(page)
    headings = [line for line in page.splitlines() if line.startswith(".SS ")]
    listed = [plain(h)[len('.SS "') : -1] for h in headings]
    every = subcommands(parser)
    assert {words[0] for words, _ in every} == set(COMMANDS)
    assert listed == ["hopper " + " ".join(words) for words, _ in every]
    assert "hopper inbox init" in listed and "hopper config check" in listed  # nested
    for words, sub in every:
        section = text.split(f'.SS "hopper {" ".join(words)}"\n', 1)[1].split(".SS ", 1)[0]
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"\n{option}" in section or f", {option}" in section, (words, option)


def test_the_page_has_the_exit_codes_of_cli_common() -> None:
    text = plain(render(full_parser()))
    codes = text.split(".SH EXIT STATUS\n", 1)[1].split(".SH ", 1)[0]
    for name in ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_TIMEOUT", "EXIT_INTERRUPTED"):
        assert f".B {getattr(common, name)}\n" in codes, name


def test_roff_requests_and_escapes_in_text_stay_text() -> None:
    assert escape(".so /etc/passwd") == "\\&.so /etc/passwd"
    assert escape("'br") == "\\&'br"
    assert escape("a\\fBb --x") == "a\\efBb \\-\\-x"
    assert plain(escape("a\\fBb --x")) == "a\\fBb --x"


def test_man_renders_the_page_without_warnings(tmp_path: Path) -> None:
    man = shutil.which("man")
    assert man is not None, "man not found: apt-get install man-db"
    page = tmp_path / "hopper.1"
    result = subprocess.run(
        [sys.executable, "-m", "hopper.cli.manpage"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    page.write_text(result.stdout)
    env = {**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8", "MANPAGER": "cat", "PAGER": "cat"}
    shown = subprocess.run(
        [man, "--warnings", "-l", str(page)], capture_output=True, text=True, env=env, timeout=60
    )
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    assert "hopper submit [-h] [--root ROOT]" in shown.stdout
    assert "hopper watchers [-h] [--root ROOT] [--config CONFIG] [--json] [--prune]" in shown.stdout
