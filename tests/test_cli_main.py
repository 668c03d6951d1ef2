"""``hopper``'s entry point: the command table and what ``--help`` costs to import."""

from __future__ import annotations

import argparse
import subprocess
import sys

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
