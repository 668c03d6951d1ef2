"""The config file (TOML): every key optional, unknown keys an error.

Looked up in order: ``--config``, ``$HOPPER_CONFIG``,
``$XDG_CONFIG_HOME/hopper/config.toml`` (``~/.config/hopper/config.toml``),
``/etc/hopper/config.toml``. No file at all is fine: the defaults run the demo.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from hopper.core.durations import BadDuration, parse_duration
from hopper.errors import ConfigError


def _seconds(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except BadDuration as exc:
            raise ValueError(str(exc)) from None
    return value


Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str | None = Field(None, description="state root; --root and $HOPPER_ROOT win")
    default_agent: str = Field("claude", description="agent for prompts that name none")
    max_parallel: int = Field(4, ge=1, description="jobs running at once")
    workdir: str | None = Field(None, description="default working directory; else the run dir")
    timeout: Seconds | None = Field(None, description="default wall-clock limit per job")
    kill_grace: Seconds = Field(10.0, description="between the stop signal and SIGKILL")
    heartbeat_interval: Seconds = Field(5.0, gt=0)
    rescan_interval: Seconds = Field(5.0, gt=0, description="full inbox rescan period")
    settle: Seconds = Field(2.0, description="a rescanned prompt still for this long is complete")
    poll_interval: Seconds = Field(0.25, gt=0, description="ABORT / exit check period")
    max_prompt_bytes: int = Field(1 << 20, ge=1)
    on_stop: Literal["abort"] = Field("abort", description="what SIGTERM does to running jobs")
    env: dict[str, str] = Field(default_factory=dict, description="added to every job's env")


def config_path(cli: str | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read, or None for the built-in defaults."""
    if cli:
        return Path(cli).expanduser()
    if env.get("HOPPER_CONFIG"):
        return Path(env["HOPPER_CONFIG"]).expanduser()
    xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    for candidate in (
        Path(xdg).expanduser() / "hopper" / "config.toml",
        Path("/etc/hopper/config.toml"),
    ):
        if candidate.is_file():
            return candidate
    return None


def load_config(cli: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate the config; raises :class:`ConfigError` naming the file and key."""
    env = os.environ if env is None else env
    path = config_path(cli, env)
    if path is None:
        return Config()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            "no such config file", path=path, hint="create it, or drop --config / $HOPPER_CONFIG"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            known = ", ".join(Config.model_fields)
            raise ConfigError(
                f"unknown key {key!r}", path=path, hint=f"known keys: {known}"
            ) from None
        raise ConfigError(f"key {key!r}: {err['msg']}", path=path) from None
