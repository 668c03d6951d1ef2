"""``hopper status``'s table: fitted to the terminal, states coloured.

**Width.** For people (stdout a terminal, or ``COLUMNS`` set: ``watch`` sets
it) the table fits ``shutil.get_terminal_size()``'s width. Until it fits, in
this order: the ID is cut to :data:`SOFT_FLOORS` (its time stamp: an id prefix
still names the job), then NAME, then whole columns are dropped, lowest value
first (:data:`DROP_ORDER`); past the last, ID and NAME are cut down to
:data:`HARD_FLOORS`. A cut cell ends in ``…``. Widths count terminal cells
(a CJK character is two). Piped with no ``COLUMNS`` the table is the full one,
as scripts have always parsed it.

**Colour.** STATE cells: succeeded green, failed red, aborted yellow, running
cyan, queued dim; footer warnings yellow, "no watcher" red. ``--color=auto``
(the default) colours only when stdout is a terminal, ``NO_COLOR`` is unset or
empty (https://no-color.org) and ``TERM`` is not ``dumb``; ``always`` and
``never`` decide regardless (a flag on the command line beats ``NO_COLOR``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence

from hopper.core.terminal import terminal_safe

GAP = 2
ELLIPSIS = "…"
DROP_ORDER = ("ATTEMPT", "AGENT_STATE", "AGENT", "STARTED", "REASON", "DURATION")
SOFT_FLOORS = (("ID", 20), ("NAME", 16))  # "20261122-110000-000…" keeps the time stamp
HARD_FLOORS = (("ID", 6), ("NAME", 6))
RESET = "\x1b[0m"
SGR = {
    "succeeded": "\x1b[32m",  # green
    "failed": "\x1b[31m",  # red
    "aborted": "\x1b[33m",  # yellow
    "running": "\x1b[36m",  # cyan
    "queued": "\x1b[2m",  # dim
    "warn": "\x1b[33m",
    "bad": "\x1b[1;31m",
}

# paint(kind, text): text escaped for the terminal, coloured as ``kind`` says when colour is on
Paint = Callable[[str, str], str]


def use_color(choice: str, isatty: bool, env: Mapping[str, str]) -> bool:
    if choice != "auto":
        return choice == "always"
    return isatty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def painter(color: bool) -> Paint:
    def paint(kind: str, text: str) -> str:
        safe = terminal_safe(text)
        code = SGR.get(kind) if color else None
        return f"{code}{safe}{RESET}" if code and safe else safe

    return paint


def fit_width(isatty: bool, env: Mapping[str, str], terminal: Callable[[], int]) -> int | None:
    """The width to fit, or None for the full table (piped, no usable ``COLUMNS``)."""
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return terminal() if isatty else None


def cells(text: str) -> int:
    """Terminal cells ``text`` takes: wide characters two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def cut(text: str, width: int, ellipsis: str) -> str:
    """``text`` in at most ``width`` cells, ending in ``ellipsis`` when cut."""
    if cells(text) <= width:
        return text
    room, out = width - cells(ellipsis), []
    for c in text:
        room -= cells(c)
        if room < 0:
            break
        out.append(c)
    return "".join(out) + ellipsis


def fit(header: Sequence[str], natural: Sequence[int], width: int) -> dict[int, int]:
    """Column index -> width for the columns kept, so the table fits ``width`` if it can."""
    kept = dict(enumerate(natural))
    index = {name: i for i, name in enumerate(header)}
    for drop in (None, *DROP_ORDER):
        if drop is not None and drop in index:
            kept.pop(index[drop], None)
        fitted = _shrink(kept, index, width, SOFT_FLOORS)
        if _total(fitted) <= width:
            return fitted
    return _shrink(kept, index, width, HARD_FLOORS)


def _total(widths: Mapping[int, int]) -> int:
    return sum(widths.values()) + GAP * max(0, len(widths) - 1)


def _shrink(
    widths: Mapping[int, int],
    index: Mapping[str, int],
    width: int,
    floors: Sequence[tuple[str, int]],
) -> dict[int, int]:
    out = dict(widths)
    over = _total(out) - width
    for name, floor in floors:
        i = index.get(name)
        if over <= 0 or i not in out:
            continue
        take = min(over, max(0, out[i] - floor))
        out[i] -= take
        over -= take
    return out


def render(
    rows: list[tuple[str, ...]],
    *,
    width: int | None,
    paint: Paint,
    state_column: int | None = None,
    ellipsis: str = ELLIPSIS,
) -> str:
    """``rows`` (the header first) as aligned columns, every cell escaped; fitted to
    ``width`` when given (measured in cells), else the full table (measured by ``len``,
    as it has always been)."""
    safe = [tuple(terminal_safe(c) for c in r) for r in rows]
    measure = cells if width is not None else len
    natural = [max(measure(r[i]) for r in safe) for i in range(len(safe[0]))]
    widths = dict(enumerate(natural)) if width is None else fit(safe[0], natural, width)
    lines = []
    for n, r in enumerate(safe):
        parts = []
        for i, w in widths.items():
            text = cut(r[i], w, ellipsis) if width is not None else r[i]
            pad = " " * (w - measure(text))
            shown = paint(text, text) if n and i == state_column else text
            parts.append(shown + pad)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def ellipsis_for(encoding: str | None) -> str:
    """``…`` if the output can encode it, else ``~``."""
    try:
        ELLIPSIS.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "~"
    return ELLIPSIS
