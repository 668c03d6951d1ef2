"""Which config file, and the one key the read commands need from it, without pydantic.

``hopper status``, ``events`` and ``logs`` need only the root from the
config. :func:`config_root` reads it with the standard library; for a file
that is not a readable TOML table, or whose ``root`` is not a string, it
raises :class:`NeedsModel` and the caller loads the config with
:func:`hopper.config.load_config`, which fails with the same message as
before. Other keys are the watcher's business: ``hopper config check`` and
``hopper run`` validate them (a typo there does not hide the job list).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from hopper.store.saferead import UnreadableFile, read_text

CONFIG_LIMIT = 1 << 20  # bytes; a config is a page or two of TOML


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


class NeedsModel(Exception):
    """The config is not plainly readable here: load it with the model for the error."""


def config_root(cli: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The config's ``root`` (None: not set, or no config file); raises
    :class:`NeedsModel` when only :func:`hopper.config.load_config` can say what is wrong."""
    env = os.environ if env is None else env
    path = config_path(cli, env)
    if path is None:
        return None
    try:
        raw = tomllib.loads(read_text(path.resolve(), CONFIG_LIMIT))
    except (OSError, UnreadableFile, tomllib.TOMLDecodeError, RecursionError):
        raw = None
    root = raw.get("root") if raw is not None else 0
    if root is None or isinstance(root, str):
        return root
    raise NeedsModel(path)


def has_table(name: str, cli: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Does the config have a ``[name]`` table? (tomllib only: a read command loads the
    model for a part of the config only when that part is there.)"""
    env = os.environ if env is None else env
    path = config_path(cli, env)
    if path is None:
        return False
    try:
        raw = tomllib.loads(read_text(path.resolve(), CONFIG_LIMIT))
    except (OSError, UnreadableFile, tomllib.TOMLDecodeError, RecursionError):
        return False
    return isinstance(raw.get(name), dict)
