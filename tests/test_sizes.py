"""core/sizes: human sizes to bytes, limits, and the config / front matter keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopper.config import load_config
from hopper.core import prompt as prompts
from hopper.core.prompt import BadPrompt
from hopper.core.sizes import BadSize, format_size, parse_limit, parse_size
from hopper.errors import ConfigError

K, M, G = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512M", 512 * M),
        ("6G", 6 * G),
        ("1.5G", 3 * G // 2),
        ("100k", 100 * K),
        ("2T", 2 << 40),
        ("512MB", 512 * M),
        ("512MiB", 512 * M),
        ("64 M", 64 * M),
        (" 1g ", G),
        ("1024", 1024),
        ("0", 0),
        (".5M", M // 2),
        (4096, 4096),
        (1.5, 1),
    ],
)
def test_parse_size(text: str | int | float, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "6X", "-1G", "1.2.3G", "6GG", "lots", "1e9", "G6"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(BadSize):
        parse_size(text)


@pytest.mark.parametrize("value", [-5, True])
def test_bad_numbers(value: int) -> None:
    with pytest.raises(BadSize):
        parse_size(value)


def test_parse_limit() -> None:
    assert parse_limit(None) is None
    for off in ("none", "None", "off", "unlimited"):
        assert parse_limit(off) is None
    assert parse_limit("6G") == 6 * G
    with pytest.raises(BadSize, match="none"):
        parse_limit("0")


def test_format_size() -> None:
    assert format_size(512) == "512B"
    assert format_size(1536) == "1.5K"
    assert format_size(300 * M) == "300.0M"
    assert format_size(6 * G) == "6.0G"
    assert format_size(3 << 40) == "3.0T"


def test_config_defaults_and_keys(tmp_path: Path) -> None:
    defaults = load_config(env={"HOME": str(tmp_path)})
    assert (defaults.memory_max, defaults.output_max) == (6 * G, 100 * M)
    assert defaults.sample_interval == 1.0
    path = tmp_path / "c.toml"
    path.write_text('memory_max = "1.5G"\noutput_max = "none"\nsample_interval = "250ms"\n')
    cfg = load_config(str(path), env={})
    assert (cfg.memory_max, cfg.output_max, cfg.sample_interval) == (3 * G // 2, None, 0.25)


def test_config_bad_size_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('memory_max = "6 gigs"\n')
    with pytest.raises(ConfigError, match="memory_max"):
        load_config(str(path), env={})


def test_front_matter_limits() -> None:
    spec = prompts.parse(b'+++\nmemory_max = "100M"\noutput_max = "none"\n+++\necho\n')
    assert spec.limit_bytes("memory_max", 6 * G) == 100 * M
    assert spec.limit_bytes("output_max", 100 * M) is None
    plain = prompts.parse(b"echo\n")
    assert plain.limit_bytes("memory_max", 6 * G) == 6 * G


def test_front_matter_bad_size_names_line_and_fix() -> None:
    with pytest.raises(BadPrompt) as err:
        prompts.parse(b'+++\nagent = "bash"\nmemory_max = "lots"\n+++\necho\n')
    assert err.value.line == 3
    assert "memory_max" in err.value.message and "2G" in err.value.hint
