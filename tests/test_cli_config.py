"""``hopper config check|show|template``: exit codes, errors naming file and key, masking."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from hopper.cli.config import MASK, duration_text, redact, template, to_toml
from hopper.cli.main import main
from hopper.config import Config, load_config
from hopper.core.durations import parse_duration


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No config from the machine or the developer: an empty HOME, no $HOPPER_*."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for key in ("XDG_CONFIG_HOME", "HOPPER_CONFIG", "HOPPER_ROOT"):
        monkeypatch.delenv(key, raising=False)


def write(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def hopper(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# --- check --------------------------------------------------------------------


def test_check_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'default_agent = "bash"\nmax_parallel = 2\ntimeout = "45m"\n')
    code, out, err = hopper(capsys, "config", "check", "--config", str(path))
    assert (code, err) == (0, "")
    assert out.startswith(f"ok: {path} is valid")


def test_check_without_a_file_uses_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    if Path("/etc/hopper/config.toml").is_file():
        pytest.skip("/etc/hopper/config.toml exists on this machine")
    code, out, _ = hopper(capsys, "config", "check")
    assert code == 0
    assert "no config file" in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "max_paralel = 2\n",
            r"unknown key 'max_paralel'; did you mean 'max_parallel'\?.*known keys: .*max_parallel",
        ),
        ("[agents.claude]\nsandbx = 1\n", r"agents\.claude\.sandbx'; did you mean 'sandbox'\?"),
        ("colour = 1\n", r"unknown key 'colour'\n"),  # nothing close: no guess
        ('max_parallel = "lots"\n', r"key 'max_parallel'"),
        ("max_parallel = 0\n", r"key 'max_parallel'.*greater than or equal to 1"),
        ('on_stop = "later"\n', r"key 'on_stop'.*'abort', 'wait' or 'detach'"),
        ('kill_grace = "10 parsecs"\n', r"key 'kill_grace'"),
        ("[agents.claude]\nsandbx = 1\n", r"agents\.claude\.sandbx"),
        ("max_parallel = \n", r"not valid TOML"),
        ('default_agent = "gpt"\n', r"unknown agent 'gpt'.*available: bash, claude, codex"),
    ],
)
def test_check_invalid_names_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    code, out, err = hopper(capsys, "config", "check", "--config", str(path))
    assert code == 1
    assert out == ""
    assert err.startswith(f"invalid: {path}: ")
    assert re.search(expected, err, re.DOTALL), err


def test_check_missing_file_is_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = hopper(capsys, "config", "check", "--config", str(tmp_path / "nope.toml"))
    assert code == 1
    assert "no such config file" in err


def test_check_warns_about_world_readable_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, '[agents.claude.env]\nANTHROPIC_API_KEY = "sk-1"\n', mode=0o644)
    code, out, err = hopper(capsys, "config", "check", "--config", str(path))
    assert code == 0
    assert "readable by everyone" in err and f"chmod 600 {path}" in err
    assert "sk-1" not in out + err
    path.chmod(0o600)
    assert hopper(capsys, "config", "check", "--config", str(path))[2] == ""


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert hopper(capsys, "config")[0] == 2
    assert hopper(capsys, "config", "frobnicate")[0] == 2
    assert hopper(capsys, "config", "check", "--bogus")[0] == 2


# --- show ---------------------------------------------------------------------

SECRETS = """\
default_agent = "bash"
timeout = "1h30m"
[env]
CI = "1"
GITHUB_TOKEN = "ghp_secret"
db_password = "hunter2"
[agents.claude]
permission_mode = "acceptEdits"
args = ["--verbose"]
[agents.claude.env]
ANTHROPIC_API_KEY = "sk-ant-secret"
HTTPS_PROXY = "http://proxy:3128"
"""


def test_show_masks_secrets_and_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, SECRETS)
    code, out, err = hopper(capsys, "config", "show", "--config", str(path))
    assert (code, err) == (0, "")
    for secret in ("ghp_secret", "hunter2", "sk-ant-secret"):
        assert secret not in out
    assert out.startswith(f"# from: {path}\n")
    shown = tomllib.loads(out)
    assert shown["env"] == {"CI": "1", "GITHUB_TOKEN": MASK, "db_password": MASK}
    assert shown["agents"]["claude"]["env"] == {
        "ANTHROPIC_API_KEY": MASK,
        "HTTPS_PROXY": "http://proxy:3128",
    }
    assert shown["timeout"] == 5400.0
    # what is shown is a valid config, equal to the real one but for the masked values
    assert Config.model_validate(shown) == load_config(str(path), {}).model_copy(
        update={"env": shown["env"], "agents": Config.model_validate(shown).agents}
    )
    assert Config.model_validate(shown).max_parallel == 4


def test_show_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SECRETS)
    code, out, _ = hopper(capsys, "config", "show", "--json", "--config", str(path))
    assert code == 0
    data = json.loads(out)
    assert data["default_agent"] == "bash"
    assert data["agents"]["claude"]["env"]["ANTHROPIC_API_KEY"] == MASK
    assert data["agents"]["claude"]["args"] == ["--verbose"]
    assert "timeout" in data and "root" not in data, "unset keys are left out"


def test_show_invalid_config_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "nonsense = 1\n")
    code, out, err = hopper(capsys, "config", "show", "--config", str(path))
    assert (code, out) == (1, "")
    assert "unknown key 'nonsense'" in err


def test_show_defaults_and_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if Path("/etc/hopper/config.toml").is_file():
        pytest.skip("/etc/hopper/config.toml exists on this machine")
    monkeypatch.setenv("HOPPER_ROOT", str(tmp_path / "r"))
    code, out, _ = hopper(capsys, "config", "show")
    assert code == 0
    assert "# from: no config file" in out
    assert f"# root in effect: {tmp_path / 'r'}" in out
    assert Config.model_validate(tomllib.loads(out)) == Config()


def test_redact_only_touches_env_tables() -> None:
    data = {"token_limit": "x", "env": {"API_KEY": "s", "PATH": "/bin"}, "agents": {}}
    assert redact(data) == {
        "token_limit": "x",
        "env": {"API_KEY": MASK, "PATH": "/bin"},
        "agents": {},
    }


def test_to_toml_quotes_odd_keys_and_strings() -> None:
    data = {"a": 'say "hi"\n', "n": 1, "t": {"key with space": True, "x.y": [1.5, "z"]}}
    assert tomllib.loads(to_toml(data)) == data


# --- template -----------------------------------------------------------------


def uncomment(text: str) -> str:
    lines = (line[2:] for line in text.splitlines() if line.startswith("# "))
    return "\n".join(line for line in lines if re.fullmatch(r"\[[\w.]+\]|\w+ = .*", line))


def test_template_is_all_comments_and_every_value_is_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = hopper(capsys, "config", "template")
    assert code == 0
    assert tomllib.loads(out) == {}
    uncommented = uncomment(out)
    assert 'kill_grace = "10s"' in uncommented
    assert "[limits]" in uncommented
    assert Config.model_validate(tomllib.loads(uncommented)) == Config()
    assert uncomment(template()) == uncommented.strip()


@pytest.mark.parametrize("seconds", [0.25, 2.0, 10.0, 90.0, 300.0, 3600.0, 5400.0, 86400.0])
def test_duration_text_parses_back(seconds: float) -> None:
    assert parse_duration(duration_text(seconds)) == seconds
