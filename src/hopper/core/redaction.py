"""A prompt's ``env`` values withheld from the copies hopper keeps of it.

Theory of operation. Every job runs as the user that runs the watcher, so
file modes cannot keep one job from reading another job's files: the only
protection for a finished job's front matter ``env`` values (which may be
secrets) is that hopper no longer keeps them. When a job ends for good, its
prompt copies (``runs/<id>/prompt.md``, then ``processed/…``) are rewritten
by :func:`redact`:

* every value of the front matter's ``env`` table becomes :data:`WITHHELD`
  (the keys stay, so a reader sees which variables the job had);
* a value of :data:`MIN_ELSEWHERE` characters or more is also replaced
  wherever else it appears in the text (another key's string, the body):
  shorter values (``"1"``, ``"fast"``) are settings more than secrets, and
  blanking every ``1`` would leave nothing to read.

The front matter is rewritten as flat TOML (core/frontmatter.py), so its
comments go (a comment can hold a value too); a prompt with no ``env`` and
no such value elsewhere is kept byte for byte. :func:`withheld` tells a
retry what was withheld, and :func:`restore` gives ``env`` values back.

Pure: text in, text out.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hopper.core import frontmatter
from hopper.core.prompt import FENCE

WITHHELD = "[withheld by hopper when the job ended]"
MIN_ELSEWHERE = 8
# An env key in front matter hopper cannot read as TOML (``env =``, ``[env]``, ``env.X =``).
_MENTIONS_ENV = re.compile(r"^\s*(\[\s*)?[\"']?env\b", re.MULTILINE)


@dataclass(frozen=True)
class Withheld:
    """What a redacted prompt no longer holds."""

    keys: tuple[str, ...]  # env variables whose values were withheld (sorted)
    elsewhere: int  # values withheld outside the env table: cannot be given back


@dataclass(frozen=True)
class _Parts:
    front: dict[str, Any] | None  # the front matter's TOML, None if none or unreadable
    front_text: str | None  # the lines between the fences, as written
    body: str


def _split(text: str) -> _Parts:
    lines = text.split("\n")
    if lines[0].rstrip() != FENCE:
        return _Parts(None, None, text)
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE), None)
    if end is None:
        return _Parts(None, None, text)
    front_text = "\n".join(lines[1:end])
    try:
        front: dict[str, Any] | None = tomllib.loads(front_text + "\n")
    except (tomllib.TOMLDecodeError, RecursionError):
        front = None
    return _Parts(front, front_text, "\n".join(lines[end + 1 :]))


def env_values(text: str) -> list[str]:
    """The string values of ``text``'s front matter ``env`` table (none if unreadable)."""
    return _env_values(_split(text).front)


def _env_values(front: dict[str, Any] | None) -> list[str]:
    env = front.get("env") if front else None
    if not isinstance(env, dict):
        return []
    return [v for v in env.values() if isinstance(v, str)]


def redact(text: str, values: Iterable[str] = ()) -> str:
    """``text`` without its env values (those of its front matter, and ``values``).

    A front matter that is not TOML, or holds what flat TOML cannot render, is
    kept as written apart from the replacement of long values.
    """
    parts = _split(text)
    secrets = {v for v in [*values, *_env_values(parts.front)] if v}
    long = sorted((v for v in secrets if len(v) >= MIN_ELSEWHERE), key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(v) for v in long)) if long else None

    def scrub(value: str) -> str:
        return pattern.sub(WITHHELD, value) if pattern else value

    front, front_text = parts.front, parts.front_text
    if front_text is None:  # no front matter
        return scrub(text)
    env = front.get("env") if front else None
    has_env = isinstance(env, dict) and bool(env)
    if front is not None and not has_env and not (pattern and pattern.search(front_text)):
        return f"{FENCE}\n{front_text}\n{FENCE}\n{scrub(parts.body)}"  # kept as written
    if front is not None:
        new: dict[str, Any] = {}
        for key, value in front.items():
            if key == "env" and isinstance(value, dict):
                new[key] = {k: WITHHELD for k in value}
            elif isinstance(value, str):
                new[key] = scrub(value)
            elif isinstance(value, list):
                new[key] = [scrub(v) if isinstance(v, str) else v for v in value]
            else:
                new[key] = value
        if all(frontmatter.renderable(v) for v in new.values()):
            return frontmatter.render(new) + scrub(parts.body)
    if not _MENTIONS_ENV.search(front_text) and not any(v in front_text for v in secrets):
        return f"{FENCE}\n{scrub(front_text)}\n{FENCE}\n{scrub(parts.body)}"
    # Not TOML hopper can rewrite, and it may hold a value: none of it is kept.
    return f"{FENCE}\n# {WITHHELD}: the front matter\n{FENCE}\n{scrub(parts.body)}"


def withheld(text: str) -> Withheld:
    """Which env values :func:`redact` withheld from ``text`` (none: nothing to give back)."""
    front = _split(text).front
    env = front.get("env") if front else None
    keys = (
        tuple(sorted(k for k, v in env.items() if v == WITHHELD)) if isinstance(env, dict) else ()
    )
    return Withheld(keys, text.count(WITHHELD) - len(keys))


def restore(text: str, values: Mapping[str, str]) -> str:
    """``text`` with the env ``values`` set (given back, or added); the front matter is
    rewritten as flat TOML, or made if there is none.

    Raises ValueError when the front matter cannot be read or rewritten.
    """
    parts = _split(text)
    if parts.front_text is None:
        return frontmatter.render({"env": dict(values)}) + text
    if parts.front is None:
        raise ValueError("its front matter is not TOML hopper can read")
    env = parts.front.get("env")
    front = {**parts.front, "env": {**(env if isinstance(env, dict) else {}), **values}}
    if not all(frontmatter.renderable(v) for v in front.values()):
        raise ValueError("its front matter holds values hopper cannot rewrite as flat TOML")
    return frontmatter.render(front) + parts.body
