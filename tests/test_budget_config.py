"""[budgets] in the config: limits per scope and period, and an error for each mistake."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hopper.config import Config, load_config
from hopper.core.budgets import Rule
from hopper.errors import ConfigError


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(str(path), {})


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    message = caught.value.render()
    assert str(tmp_path / "config.toml") in message  # the file is named
    return message


def test_no_budgets_by_default(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert config.budgets.all_rules() == []
    assert config.budgets.on_budget == "finish"
    assert config.budgets.zone() is None


def test_every_scope_and_period(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[budgets]
daily_usd = 20
monthly_tokens = 50_000_000
timezone = "Europe/Berlin"
on_budget = "stop"
[budgets.groups.app]
daily_usd = 5
[budgets.agents.codex]
daily_tokens = 2_000_000
[budgets.sessions.auth-refactor]
weekly_usd = 10.5
""",
    )
    budgets = config.budgets
    assert budgets.all_rules() == [
        Rule("all", None, "day", "usd", 20.0),
        Rule("all", None, "month", "tokens", 50_000_000.0),
        Rule("group", "app", "day", "usd", 5.0),
        Rule("agent", "codex", "day", "tokens", 2_000_000.0),
        Rule("session", "auth-refactor", "week", "usd", 10.5),
    ]
    assert budgets.on_budget == "stop"
    assert str(budgets.zone()) == "Europe/Berlin"
    assert budgets.all_rules()[2].key == "[budgets.groups.app] daily_usd"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[budgets]\ndayly_usd = 5\n", r"unknown key 'budgets.dayly_usd'.*daily_usd"),
        (
            "[budgets.groups.app]\ndaily_dollars = 5\n",
            r"unknown key 'budgets.groups.app.daily_dollars'.*known keys: daily_usd, weekly_usd",
        ),
        ("[budgets]\ndaily_usd = 0\n", r"'budgets.daily_usd': Input should be greater than 0"),
        ("[budgets]\ndaily_usd = -3\n", r"'budgets.daily_usd': Input should be greater than 0"),
        ("[budgets]\ndaily_usd = nan\n", r"'budgets.daily_usd'.*finite"),
        ("[budgets]\ndaily_tokens = 1.5\n", r"'budgets.daily_tokens'.*integer"),
        ('[budgets]\ndaily_usd = "five"\n', r"'budgets.daily_usd'.*number"),
        (
            '[budgets]\ntimezone = "Europe/Berln"\n',
            r"'budgets.timezone': unknown time zone 'Europe/Berln'; use an IANA name",
        ),
        (
            '[budgets]\ntimezone = "../../etc/passwd"\n',
            r"'budgets.timezone': unknown time zone",
        ),
        ('[budgets]\non_budget = "kill"\n', r"'budgets.on_budget'.*'finish' or 'stop'"),
        (
            "[budgets.groups.app]\n",
            r"'budgets.groups.app': sets no limit; give one of daily_usd.*or remove the table",
        ),
        (
            "[budgets.agents.bash]\ndaily_usd = 1\n",
            r"'budgets.agents': bash jobs report no spend.*remove \[budgets.agents.bash\]",
        ),
    ],
)
def test_each_mistake_names_the_key_and_the_fix(tmp_path: Path, text: str, expected: str) -> None:
    message = error(tmp_path, text)
    assert re.search(expected, message, re.S), message
