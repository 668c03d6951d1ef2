"""Text from outside, made safe to print on a terminal: the one escape every command uses.

A prompt's file name is chosen by whoever drops it, and it travels into job.json,
events.jsonl, the index and every listing; so do inbox folder names, details that
quote them, and whatever a job writes into a record it can reach. Printed raw, an
``ESC ] 0 ;`` in a name retitles the operator's terminal, ``ESC ] 52`` writes their
clipboard, ``ESC [ 8 m`` hides the rest of the screen, and a newline forges a whole
row of ``hopper status``. So every command prints such text through
:func:`terminal_safe`, which writes each control character the way Python writes it
in a string literal:

- C0 controls, DEL and the C1 controls (U+0080-U+009F): ``\\n``, ``\\r``, ``\\t``,
  else ``\\xNN`` (ESC is ``\\x1b``);
- the characters that reorder or break a line without being seen (bidi embeddings,
  overrides and isolates such as U+202E, the line and paragraph separators):
  ``\\uNNNN``;
- the bytes of a name that is not UTF-8 (surrogate escapes): ``\\xNN``, as records
  already show them (``intake.printable``).

Backslashes are left alone, so escaping twice changes nothing and a name recorded
with ``\\xNN`` escapes reads the same everywhere. ``--json`` output is left to
``json.dumps``, which escapes control characters itself. A job's own output
(``hopper logs``) is printed as written, as ``cat`` would.
"""

from __future__ import annotations

_INVISIBLE = (
    0x061C,  # arabic letter mark
    0x200E,  # left-to-right mark
    0x200F,  # right-to-left mark
    *range(0x202A, 0x202F),  # embeddings and overrides (U+202E: right-to-left override)
    *range(0x2066, 0x206A),  # isolates
    0x2028,  # line separator
    0x2029,  # paragraph separator
)

_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
_ESCAPES.update({c: f"\\u{c:04x}" for c in _INVISIBLE})
# Lone surrogates cannot be encoded for a terminal at all; the ones surrogateescape
# makes of a non-UTF-8 byte show as that byte.
_ESCAPES.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})
_ESCAPES.update({c: f"\\x{c - 0xDC00:02x}" for c in range(0xDC80, 0xDD00)})

_KEEP_NEWLINES = {c: e for c, e in _ESCAPES.items() if c != 0x0A}


def terminal_safe(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character escaped (see the module's list).

    ``lines=True`` keeps ``\\n`` for a message of several lines (an error and its
    hint); a field in a row or a one-line message wants the default, where a newline
    is escaped like any other control character.
    """
    if text.isprintable():  # every character escaped here is not printable
        return text
    return text.translate(_KEEP_NEWLINES if lines else _ESCAPES)
