"""config.load_config: defaults, durations, and errors that name the file and key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hopper.config import Config, config_path, load_config
from hopper.core.schedule import SlotLimits
from hopper.errors import ConfigError


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "config.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_defaults_without_any_file(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    if Path("/etc/hopper/config.toml").is_file():
        pytest.skip("/etc/hopper/config.toml exists on this machine")
    assert config_path(None, env) is None
    config = load_config(None, env)
    assert config == Config()
    assert config.default_agent == "claude"
    assert config.max_prompt_bytes == 1 << 20
    assert (config.settle, config.rescan_interval, config.kill_grace) == (1.0, 5.0, 10.0)


def test_lookup_order(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "hopper").mkdir(parents=True)
    (xdg / "hopper" / "config.toml").write_text("")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(xdg)}
    assert config_path(None, env) == xdg / "hopper" / "config.toml"
    env["HOPPER_CONFIG"] = str(tmp_path / "env.toml")
    assert config_path(None, env) == tmp_path / "env.toml"
    assert config_path(str(tmp_path / "cli.toml"), env) == tmp_path / "cli.toml"


def test_home_config_dir_fallback(tmp_path: Path) -> None:
    (tmp_path / ".config" / "hopper").mkdir(parents=True)
    (tmp_path / ".config" / "hopper" / "config.toml").write_text("max_parallel = 2\n")
    assert load_config(None, {"HOME": str(tmp_path)}).max_parallel == 2


def test_slot_limits_carry_max_parallel_and_the_limits_table(tmp_path: Path) -> None:
    """The scheduler's limits are built from the config in one place, every field carried."""
    path = write(
        tmp_path,
        "max_parallel = 6\n[limits]\nagent_default = 2\ngroup_default = 3\n"
        "agents = { codex = 1 }\ngroups = { night = 4 }\n",
    )
    limits = load_config(str(path), {}).slot_limits()
    assert limits == SlotLimits(
        max_parallel=6, agents={"codex": 1}, agent_default=2, groups={"night": 4}, group_default=3
    )
    assert [limits.for_agent(a) for a in ("bash", "claude", "codex")] == [6, 2, 1]
    assert [limits.for_group(g) for g in ("night", "day", None)] == [4, 3, None]


def test_durations_parse(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'timeout = "1h30m"\nkill_grace = "250ms"\nsettle = 3\nrescan_interval = "0.5s"\n'
        'heartbeat_interval = 2.5\npoll_interval = "50ms"\n',
    )
    config = load_config(str(path), {})
    assert config.timeout == 5400.0
    assert config.kill_grace == 0.25
    assert config.settle == 3.0
    assert config.rescan_interval == 0.5
    assert config.heartbeat_interval == 2.5
    assert config.poll_interval == pytest.approx(0.05)


def test_bad_duration_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'kill_grace = "soon"\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert str(path) in str(info.value) and "kill_grace" in str(info.value)


def test_zero_rescan_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rescan_interval"):
        load_config(str(write(tmp_path, "rescan_interval = 0\n")), {})


def test_unknown_key_names_file_and_key_and_lists_known(tmp_path: Path) -> None:
    path = write(tmp_path, 'default_agent = "bash"\nmax_paralel = 3\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    text = str(info.value)
    assert str(path) in text
    assert "'max_paralel'" in text
    for key in Config.model_fields:
        assert key in info.value.hint


def test_wrong_type_names_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(str(write(tmp_path, 'max_parallel = "many"\n')), {})
    assert "max_parallel" in str(info.value)


def test_nested_env_key_is_dotted(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(str(write(tmp_path, "[env]\nTOKEN = 3\n")), {})
    assert "env.TOKEN" in str(info.value)


@pytest.mark.parametrize(
    "text",
    ["max_parallel = = 3\n", "[unclosed\n", b"root = '\xff'\n"],
    ids=["syntax", "table", "utf8"],
)
def test_bad_toml_names_the_file(tmp_path: Path, text: str | bytes) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert str(path) in str(info.value)
    assert "TOML" in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(str(missing), {})
    assert str(missing) in str(info.value)
    assert "no such config file" in str(info.value)
    assert info.value.hint


def test_missing_hopper_config_env_file(tmp_path: Path) -> None:
    missing = tmp_path / "env.toml"
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(None, {"HOPPER_CONFIG": str(missing)})


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("kill_grace = nan", "kill_grace", "not a finite duration"),
        ('kill_grace = "inf"', "kill_grace", "not a finite duration"),
        ("retry_backoff = -1", "retry_backoff", "negative"),
        ("timeout = inf", "timeout", "not a finite duration"),
        ("timeout = 0", "timeout", "not more than 0"),
        ("settle = 1e300", "settle", "longer than ten years"),
        ("memory_max = inf", "memory_max", "not a finite size"),
        ('output_max = "' + "9" * 400 + '"', "output_max", "more than 1 EiB"),
        ("[agents.claude]\nretry_backoff = nan", "agents.claude.retry_backoff", "finite"),
        ("[agents.claude]\nidle_timeout = 0", "agents.claude.idle_timeout", "more than 0"),
        ('[routes."team"]\ntimeout = -inf', "routes.team.timeout", "finite"),
    ],
)
def test_numbers_must_be_finite_naming_the_key(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    """nan, inf, negatives (and 0 for timeouts) are refused with the key's name (issue 13)."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert f"key {key!r}" in err.value.message, err.value.message
    assert fragment in err.value.message, err.value.message
    assert "Value error" not in err.value.message
    assert err.value.path == path


def test_config_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "env = " + "[" * 1000 + "]" * 1000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(str(path), {})


def test_config_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """A FIFO (or device) as the config blocked load_config in open()."""
    path = tmp_path / "config.toml"
    os.mkfifo(path)
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert "it is a FIFO, not a regular file" in err.value.message
    assert err.value.path == path


def test_config_through_a_symlink_is_read(tmp_path: Path) -> None:
    """Config management links /etc files: a link to the config is followed (once)."""
    real = write(tmp_path, "max_parallel = 3\n")
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    assert load_config(str(link), {}).max_parallel == 3
