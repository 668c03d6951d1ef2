"""Inbox sub-path -> route defaults, and the group of a job. Pure.

A route key is an inbox sub-path whose segments are literal folder names or
``{name}`` placeholders that match any one folder: ``acme/{repo}/{branch}``.
A prompt matches a route if the route's segments are a prefix of its own
sub-path; of several matches the longest wins, then the one with more
literal segments. Placeholder values fill ``{name}`` in the route's string
values, so ``workdir = "~/src/{repo}"`` and ``ref = "{branch}"`` follow the
tree (prompt-valet's owner/repo/branch layout).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypeVar

_PLACEHOLDER = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_FILL = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

T = TypeVar("T")


@dataclass(frozen=True)
class Match:
    key: str
    values: dict[str, str]  # placeholder -> folder name


def plain_parts(rel: str) -> tuple[str, ...]:
    """``PurePosixPath(rel).parts``, without building the path when ``rel`` is
    already in its normal form (relative, no empty or ``.`` part: the paths hopper
    records), which is then ``rel.split("/")``; anything else is parsed as before."""
    parts = rel.split("/")
    if "" in parts or "." in parts:
        return PurePosixPath(rel).parts
    return tuple(parts)


def plain_name(rel: str) -> str:
    """``PurePosixPath(rel).name``, from the string when ``rel`` is plain (as above)."""
    parts = rel.split("/")
    if "" in parts or "." in parts:
        return PurePosixPath(rel).name
    return parts[-1]


def subpath(inbox_rel: str) -> tuple[str, ...]:
    """``inbox/acme/app/x.prompt.md`` -> ``("acme", "app")``."""
    parts = plain_parts(inbox_rel)
    if parts[:1] == ("inbox",):
        parts = parts[1:]
    return tuple(parts[:-1])


def segments(key: str) -> tuple[str, ...]:
    return tuple(p for p in key.strip("/").split("/") if p)


def _match_one(key: str, folders: Sequence[str]) -> dict[str, str] | None:
    segs = segments(key)
    if len(segs) > len(folders):
        return None
    values: dict[str, str] = {}
    for seg, folder in zip(segs, folders, strict=False):
        placeholder = _PLACEHOLDER.match(seg)
        if placeholder:
            values[placeholder.group(1)] = folder
        elif seg != folder:
            return None
    return values


def match_route(keys: Sequence[str], folders: Sequence[str]) -> Match | None:
    """The best route for a prompt in ``folders`` (its inbox sub-path), or None."""
    best: tuple[tuple[int, int], Match] | None = None
    for key in keys:
        values = _match_one(key, folders)
        if values is None:
            continue
        segs = segments(key)
        rank = (len(segs), sum(1 for s in segs if not _PLACEHOLDER.match(s)))
        if best is None or rank > best[0]:
            best = (rank, Match(key, values))
    return best[1] if best else None


def fill(template: str, values: Mapping[str, str]) -> str:
    """``{name}`` -> its value; unknown placeholders are left as they are."""
    return _FILL.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def literal_prefix(key: str) -> tuple[str, ...]:
    """The folders of a route key before its first placeholder (what ``inbox init`` makes)."""
    out = []
    for seg in segments(key):
        if _PLACEHOLDER.match(seg):
            break
        out.append(seg)
    return tuple(out)


def group_of(folders: Sequence[str]) -> str | None:
    """The default group: the first inbox sub-folder; None at the top of the inbox."""
    return folders[0] if folders else None


def first(*values: T | None) -> T | None:
    """The first value that is not None (front matter, then route, then config)."""
    for value in values:
        if value is not None:
            return value
    return None
