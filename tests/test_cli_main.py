"""``hopper``'s entry point: the command table and what ``--help`` costs to import."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from hopper.cli import main as cli_main


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: str(choice.help) for choice in action._choices_actions}
    raise AssertionError("the parser has no subcommands")


def test_the_command_table_matches_what_each_module_registers() -> None:
    lazy = _subcommands(cli_main.build_parser())
    full = _subcommands(cli_main.build_parser(tuple(cli_main.COMMANDS)))
    assert lazy == full
    assert list(lazy) == list(cli_main.COMMANDS)


@pytest.mark.parametrize("name", sorted(cli_main.COMMANDS))
def test_each_command_parses_its_own_arguments(name: str) -> None:
    parser = cli_main.build_parser((name,))
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([name, "--help"])
    assert exit_info.value.code == 0


def _imported_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\n"
        "from hopper.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_help_imports_no_command_module_and_no_pydantic() -> None:
    modules = _imported_after(["--help"])
    assert "pydantic" not in modules
    assert not {m for m in modules if m.startswith("hopper.cli.") and m != "hopper.cli.main"}


def test_a_command_imports_its_own_module_only() -> None:
    modules = _imported_after(["schema", "--help"])
    assert "hopper.cli.schema" in modules
    assert "hopper.cli.doctor" not in modules
    assert "hopper.cli.web" not in modules


def test_an_unknown_command_is_a_usage_error_listing_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main.main(["xyzzy"]) == 2
    err = capsys.readouterr().err
    assert "hopper: unknown command 'xyzzy'; the commands: run, submit" in err
    assert " status," in err and " resume," in err


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main([]) == 2
    assert "status    show jobs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "read_as"),
    [
        (["--root", "/r", "status"], ["status", "--root", "/r"]),
        (
            ["--root=/r", "--config", "c", "inbox", "init"],
            ["inbox", "init", "--root=/r", "--config", "c"],
        ),
        (["--root", "/r", "status", "--root", "/s"], ["status", "--root", "/s"]),  # after wins
        (["--root", "/r", "submit", "--", "-x"], ["submit", "--root", "/r", "--", "-x"]),
        (["status", "--root", "/r"], ["status", "--root", "/r"]),
        (["--root"], ["--root"]),
    ],
)
def test_root_options_before_the_command_move_after_it(argv: list[str], read_as: list[str]) -> None:
    assert cli_main.hoist_root_options(argv) == read_as


def test_hopper_root_before_the_command_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "r"
    (root / "inbox" / "team").mkdir(parents=True)
    (root / "inbox" / "team" / "a.prompt.md").write_text("echo hi\n")
    config = tmp_path / "config.toml"
    config.write_text("")
    assert cli_main.main(["--root", str(root), "--config", str(config), "status"]) == 0
    assert f"1 prompt waits unclaimed in {root / 'inbox'}: team/a" in capsys.readouterr().out
    assert cli_main.main([f"--config={config}", "--root", str(root), "pause", "--json"]) == 0
    assert (root / "PAUSE").exists()
