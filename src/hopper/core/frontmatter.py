"""Render a flat options table as TOML front matter (the inverse of prompt parsing)."""

from __future__ import annotations

import json
import re

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

Value = str | int | float | bool | list[str] | dict[str, str]


def _string(text: str) -> str:
    """A TOML basic string: JSON's escapes, plus DEL, which TOML forbids raw and JSON keeps."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"


def renderable(value: object) -> bool:
    """Whether :func:`render` can write ``value``: a :data:`Value`, nothing nested deeper."""
    if isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return False


def render(options: dict[str, Value]) -> str:
    """``+++`` … ``+++`` with one ``key = value`` line per option, or "" if empty."""
    if not options:
        return ""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in options.items()]
    return "+++\n" + "\n".join(lines) + "\n+++\n"
