"""``man hopper``: the page is written from the parser, so it lists every command,
subcommand and option hopper has, and man renders it without a warning; the
copy the wheel ships (man/hopper.1) is that page, and the wheel carries it."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hopper import __version__
from hopper.agents import npm
from hopper.cli import common, manpage
from hopper.cli.main import COMMANDS, build_parser
from hopper.cli.manpage import escape, plain, render

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "man" / "hopper.1"


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


def test_the_shipped_page_is_the_parsers_page() -> None:
    assert SHIPPED.read_text() == render(full_parser()), (
        "man/hopper.1 is not the parser's page: python -m hopper.cli.manpage > man/hopper.1"
    )


def test_the_page_names_no_path_of_the_installation_that_wrote_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`agents install --system`'s help names this installation's shared folder; the
    page says <prefix> there, so the shipped copy is the same for every venv."""
    here = "/opt/some-venv/share/hopper/agents"
    monkeypatch.setattr(manpage, "system_dir", lambda: Path(here))
    monkeypatch.setattr(npm, "system_dir", lambda: Path(here))
    page = render(full_parser())
    assert escape(here) not in page and here not in page
    assert escape("<prefix>/share/hopper/agents") in page


def test_the_wheel_installs_the_page_where_man_finds_it(tmp_path: Path) -> None:
    """A wheel built from the checkout (a copy of what the build reads, so the repo
    tree gets no build/ folder) holds the page as data for <prefix>/share/man/man1:
    `pip install` then puts it beside the <prefix>/bin that man looks next to."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "man"):
        shutil.copytree(REPO / folder, source / folder, ignore=skip)
    out = tmp_path / "wheel"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("hopper_jobs-*.whl")
    page = f"hopper_jobs-{__version__}.data/data/share/man/man1/hopper.1"
    with zipfile.ZipFile(wheel) as whl:
        assert page in whl.namelist()
        assert whl.read(page) == SHIPPED.read_bytes()
