"""The supervisor's contract: the launch spec it reads and the exit record it writes.

Shared by both sides. The watcher (proc/spawn.py) builds a :class:`LaunchSpec`
and sends ``to_json()`` on the supervisor's stdin; the supervisor
(proc/supervise.py, run as ``python -I -S`` by path) reads it back with
:meth:`LaunchSpec.from_json` and writes exit.json from an :class:`ExitRecord`.
The shell reads exit.json into ``core.record.ExitStatus``;
tests/test_supervisor_protocol.py holds the two to the same fields.

Standard library only, and importable as a sibling module (``import
protocol``): the supervisor loads it without hopper on its path. Both
``from_json`` refuse a value of the wrong type and a key they do not know,
naming the field, so a spec from a newer or older watcher fails loudly
instead of running with a default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LIMITS = ("memory", "output", "idle")  # ExitRecord.limit: what made the supervisor end the tree
DEFAULT_GRACE = 10.0  # seconds; also what a non-finite grace falls back to
DEFAULT_SAMPLE_INTERVAL = 1.0  # seconds; also what a zero or non-finite interval falls back to
RESOURCE_KEYS = ("cpu_seconds", "peak_rss_bytes", "output_bytes", "rss_bytes", "processes")


class ProtocolError(ValueError):
    """A launch spec or exit record that does not match the contract."""


LEASE_BREAK_FILE = "/proc/sys/fs/lease-break-time"


def lease_break_time() -> float | None:
    """Seconds the kernel lets a lease holder keep an opener waiting (the most a
    spawned job can be held at its gate, proc/gate.py); None where it cannot be read."""
    try:
        with open(LEASE_BREAK_FILE, "rb") as f:
            return float(int(f.read(32)))
    except (OSError, ValueError):
        return None


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _optional(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: v is None or check(v)


def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _is_str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(a, str) for a in v)


def _is_int_list(v: object) -> bool:
    return isinstance(v, list) and all(_is_int(a) for a in v)


def _is_str_dict(v: object) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )


def _is_file_map(v: object) -> bool:
    """File names in one directory (no slash, no NUL, not . or ..) to their text."""
    return (
        isinstance(v, dict)
        and _is_str_dict(v)
        and all(k not in ("", ".", "..") and "/" not in k and "\0" not in k for k in v)
    )


def _is_resources(v: object) -> bool:
    return isinstance(v, dict) and all(
        k in RESOURCE_KEYS and (x is None or _is_number(x)) for k, x in v.items()
    )


def _is_limit(v: object) -> bool:
    return v in LIMITS


# What each field must hold, as checked by from_json, and how to say it.
_SPEC_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "argv": (_is_str_list, "a list of strings"),
    "cwd": (_is_str, "a string"),
    "env": (_is_str_dict, "an object of strings"),
    "log": (_is_str, "a string"),
    "stop_signals": (_is_int_list, "a list of signal numbers"),
    "grace": (_is_number, "a number of seconds"),
    "timeout": (_optional(_is_number), "a number of seconds or null"),
    "memory_max": (_optional(_is_int), "a whole number of bytes or null"),
    "output_max": (_optional(_is_int), "a whole number of bytes or null"),
    "sample_interval": (_is_number, "a number of seconds"),
    "idle_timeout": (_optional(_is_number), "a number of seconds or null"),
    "run_dir": (_optional(_is_str), "a string or null"),
    "long_gate": (lambda v: isinstance(v, bool), "true or false"),
    "files": (_is_file_map, "an object of file names (no slash) to their text"),
    "make_cwd": (lambda v: isinstance(v, bool), "true or false"),
}

_EXIT_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "started": (lambda v: isinstance(v, bool), "true or false"),
    "supervisor_pid": (_optional(_is_int), "a pid or null"),
    "pid": (_optional(_is_int), "a pid or null"),
    "exit_code": (_optional(_is_int), "an exit code or null"),
    "signal": (_optional(_is_int), "a signal number or null"),
    "timed_out": (lambda v: isinstance(v, bool), "true or false"),
    "stop_signal_sent": (lambda v: isinstance(v, bool), "true or false"),
    "leftovers_killed": (_is_int, "a whole number"),
    "escaped": (_is_int, "a whole number"),
    "limit": (_optional(_is_limit), f"one of {', '.join(LIMITS)} or null"),
    "resources": (_optional(_is_resources), f"an object of numbers ({', '.join(RESOURCE_KEYS)})"),
    "error": (_optional(_is_str), "a string or null"),
    "finished_at": (_is_str, "an ISO 8601 time"),
}


def _known(
    what: str, data: object, checks: dict[str, tuple[Callable[[object], bool], str]]
) -> None:
    """Refuse anything but a JSON object whose keys are all in ``checks``."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(data).__name__}")
    if not data.keys() <= checks.keys():
        unknown = sorted(set(data) - set(checks))
        raise ProtocolError(
            f"{what}: unknown key(s) {', '.join(map(repr, unknown))}; "
            "the watcher and the supervisor come from different hopper versions: "
            "restart the watcher so both sides run the same code"
        )


def _validated(
    what: str, data: object, checks: dict[str, tuple[Callable[[object], bool], str]]
) -> dict[str, Any]:
    """``data`` as keyword arguments, after checking every key and value against ``checks``."""
    _known(what, data, checks)
    assert isinstance(data, dict)
    for key, value in data.items():
        check, expected = checks[key]
        if not check(value):
            raise ProtocolError(f"{what}: {key!r} must be {expected}, got {value!r}")
    return dict(data)


class _Decoding:
    """What ``_json``'s scanner reads of a decoder: ``json.loads``'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": -math.inf, "Infinity": math.inf, "NaN": math.nan}.__getitem__


# json.loads without its Python layers (encoding detection, a regular expression
# for the whitespace, the decoder's methods): a forked supervisor parses its spec
# first, and every object it touches is a page it copies from the fork server.
def _scanner() -> Callable[[str, int], tuple[object, int]] | None:
    try:
        from _json import make_scanner
    except ImportError:  # not CPython: json.loads does it all
        return None
    scan: Callable[[str, int], tuple[object, int]] = make_scanner(_Decoding())  # type: ignore[arg-type]
    return scan


_scan = _scanner()


def _parse(what: str, text: str | bytes) -> object:
    """``json.loads(text)``: one JSON value, whitespace around it allowed."""
    try:
        if _scan is None:
            return json.loads(text)
        doc = (text.decode() if isinstance(text, bytes) else text).strip(" \t\n\r")
        try:
            value, end = _scan(doc, 0)
        except StopIteration:
            raise ValueError("Expecting value: line 1 column 1 (char 0)") from None
        if end != len(doc):
            raise ValueError(f"Extra data: char {end}")
        return value
    except ValueError as exc:  # UnicodeDecodeError and json's JSONDecodeError too
        raise ProtocolError(f"{what}: not JSON ({exc})") from None


@dataclass(frozen=True)
class LaunchSpec:
    """What to run; sent to the supervisor over a pipe, never on a command line."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    log: str
    stop_signals: list[int] = field(default_factory=lambda: [15])
    grace: float = DEFAULT_GRACE  # seconds between a stop signal and the next (then SIGKILL)
    timeout: float | None = None
    memory_max: int | None = None  # bytes of RSS for the whole tree; None: no limit
    output_max: int | None = None  # bytes of job.log; None: no limit
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL  # seconds between measurements of the tree
    idle_timeout: float | None = None  # job.log not growing this long ends the tree (bash)
    run_dir: str | None = None  # set by spawn.launch: a pooled supervisor learns it here
    # The job may wait at its gate for long (a start ahead, released when a slot
    # frees, with no bound on when): forked, since a spawned job's gate gives way
    # after the kernel's lease-break-time (proc/gate.py, :func:`lease_break_time`).
    # A start ahead the watcher withdraws well within that time is spawned.
    long_gate: bool = False
    # Files the job reads, by name in the run directory (a bash job's script.sh): the
    # supervisor writes them right after its pid line (while the watcher commits the
    # start), before it opens the gate, without an fsync: they are made from
    # admission.json, which is what start runs (prepare.py).
    files: dict[str, str] = field(default_factory=dict)
    # cwd is the run directory's work/ (the job names no workdir of its own): the
    # supervisor makes it with the files, so the watcher makes no directory for it.
    make_cwd: bool = False

    def __post_init__(self) -> None:
        _validated("launch spec", _fields(self), _SPEC_CHECKS)

    def to_json(self, run_dir: str | None = None) -> str:
        """The spec as one JSON line; ``run_dir`` (a string, as the field must hold)
        in place of its own: what ``dataclasses.replace`` would send, without
        checking every field (the whole environment) a second time."""
        data = _fields(self)
        if run_dir is not None:
            data["run_dir"] = run_dir
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchSpec:
        """Parse and check a spec line; :class:`ProtocolError` names what is wrong."""
        what = "launch spec (the supervisor's stdin)"
        data = _parse(what, text)
        _known(what, data, _SPEC_CHECKS)
        assert isinstance(data, dict)
        missing = [name for name in _REQUIRED_SPEC if name not in data]
        if missing:
            _validated(what, data, _SPEC_CHECKS)  # a wrong value is named first
            raise ProtocolError(f"{what}: missing {', '.join(missing)}")
        try:
            return cls(**data)  # its values are checked once, by __post_init__
        except ProtocolError as exc:
            raise ProtocolError(f"{what}{str(exc).removeprefix('launch spec')}") from None


_REQUIRED_SPEC = ("argv", "cwd", "env", "log")


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, values as they are: its values are JSON
    values already, so ``asdict``'s deep copy (the whole job environment, per
    start) buys nothing."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def finite(value: float | None) -> float | None:
    """A finite, non-negative number, else None ("no limit"): a NaN timeout never spins."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return float(value)


@dataclass(frozen=True)
class ExitRecord:
    """``runs/<id>/exit.json``: how the job ended, as its supervisor saw it."""

    started: bool
    finished_at: str
    supervisor_pid: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stop_signal_sent: bool = False
    leftovers_killed: int = 0
    escaped: int = 0  # processes still alive when the supervisor gave up killing
    limit: str | None = None
    resources: dict[str, int | float | None] | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        _validated("exit record", _fields(self), _EXIT_CHECKS)

    def to_json(self) -> str:
        return json.dumps(_fields(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> ExitRecord:
        what = "exit.json"
        data = _validated(what, _parse(what, text), _EXIT_CHECKS)
        missing = [name for name in ("started", "finished_at") if name not in data]
        if missing:
            raise ProtocolError(f"{what}: missing {', '.join(missing)}")
        return cls(**data)
