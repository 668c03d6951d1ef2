"""A prompt file -> :class:`PromptSpec`, or a :class:`BadPrompt` naming line and fix.

A prompt is Markdown with optional TOML front matter between two ``+++``
lines. Every key is optional; what is absent comes from the config and the
inbox route. This module is pure: it takes bytes and a display name and
never touches the filesystem.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hopper.core import mounts
from hopper.core.durations import BadDuration, parse_positive_duration
from hopper.core.sizes import BadSize, parse_limit

FENCE = "+++"
# Caps on what one prompt may ask for. Every queued job's `after` is checked
# on each scheduling pass: 90,000 names cost 30 % of a core (issue 13).
MAX_AFTER = 100
MAX_ARGV = 256  # check, on_success, on_failure, on_finish
MAX_ENV = 256
MAX_MOUNTS = 64
# Front matter is flat keys, lists of strings and one table of strings; a
# value nested deeper than this is a mistake or an attack on the parser.
MAX_NESTING = 8
_TOML_LINE = re.compile(r"at line (\d+)")
_BASH_BLOCK = re.compile(r"^```(?:bash|sh)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# Front matter `env`: POSIX-style names, hopper's own HOPPER_* left to hopper, a size cap.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_MAX_BYTES = 64 * 1024
# A git branch name hopper accepts: safe path segments, no "..", no leading "-".
_BRANCH_OK = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<![./])$")


class BadPrompt(ValueError):
    """The prompt cannot be run; ``line`` is 1-based where known."""

    def __init__(self, message: str, *, line: int | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.hint = hint

    def describe(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        text = f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class PromptOptions(BaseModel):
    """The front matter keys hopper understands. Unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    agent: Annotated[str, Field(min_length=1)] | None = None
    name: str | None = None
    workdir: Annotated[str, Field(min_length=1)] | None = None
    timeout: Annotated[str | int | float | None, Field(union_mode="left_to_right")] = None
    env: dict[str, str] = Field(default_factory=dict)
    session: str | None = None
    check: list[str] | None = None
    max_nudges: Annotated[int, Field(ge=0, le=20)] | None = None
    idle_timeout: Annotated[str | int | float | None, Field(union_mode="left_to_right")] = None
    on_idle: Literal["abort", "nudge"] | None = None
    on_error: Literal["fail", "retry", "pause"] | None = None
    on_dead: Literal["fail", "resume"] | None = None
    retries: Annotated[int, Field(ge=0, le=100)] | None = None
    memory_max: Annotated[str | int | None, Field(union_mode="left_to_right")] = None
    output_max: Annotated[str | int | None, Field(union_mode="left_to_right")] = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] | None = None
    group: str | None = None
    after: list[str] = Field(default_factory=list)
    workspace: Literal["none", "folder", "worktree"] | None = None
    branch: str | None = None
    ref: str | None = None
    on_success: list[str] | None = None
    on_failure: list[str] | None = None
    on_finish: list[str] | None = None
    executor: Literal["local", "slurm", "container"] | None = None
    mode: Literal["headless", "interactive"] | None = None
    image: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    mounts: list[str] | None = None
    network: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    cpus: Annotated[int, Field(ge=1)] | None = None
    mem: Annotated[str | int | None, Field(union_mode="left_to_right")] = None
    gres: str | None = None
    retry_of: str | None = None
    max_cost_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None

    @field_validator("timeout", "idle_timeout")
    @classmethod
    def _duration(cls, value: str | int | float | None) -> str | int | float | None:
        if value is not None:
            try:
                parse_positive_duration(value)
            except BadDuration as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("memory_max", "output_max")
    @classmethod
    def _size(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            try:
                parse_limit(value)
            except BadSize as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("check")
    @classmethod
    def _check(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError('must be a non-empty argv, e.g. ["pytest", "-q"]')
        return value

    @field_validator("check", "on_success", "on_failure", "on_finish")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) > MAX_ARGV:
            raise ValueError(f"has {len(value)} arguments; at most {MAX_ARGV}")
        return value

    @field_validator("env")
    @classmethod
    def _env_size(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV:
            raise ValueError(f"sets {len(value)} variables; at most {MAX_ENV}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        # Messages name keys, never values: a value may be a secret. (_env_size counts.)
        size = sum(
            len(k.encode()) + len(v.encode("utf-8", "surrogatepass")) for k, v in value.items()
        )
        if size > ENV_MAX_BYTES:
            raise ValueError(f"is {size} bytes, over the limit of {ENV_MAX_BYTES} bytes")
        for key, text in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(
                    f"{key!r} is not an environment variable name "
                    "(letters, digits and '_', not starting with a digit)"
                )
            if key.upper().startswith("HOPPER_"):
                raise ValueError(f"{key!r}: HOPPER_* variables are set by hopper itself")
            if "\x00" in text:
                raise ValueError(f"the value of {key!r} contains a NUL character")
        return value

    @field_validator("image", "network")
    @classmethod
    def _engine_word(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("-") or any(c in value for c in "\x00 \n")):
            raise ValueError("may not start with '-' or contain spaces, newlines or NUL")
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) > MAX_MOUNTS:
            raise ValueError(f"has {len(value)} entries; at most {MAX_MOUNTS}")
        for text in value or []:
            try:
                mounts.parse(text, home="/")  # ~ is checked here, expanded at start
            except mounts.BadMount as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("name", "session", "group")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_OK.match(value):
            raise ValueError(
                "must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return value

    @field_validator("retry_of")
    @classmethod
    def _retry_of(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_OK.match(value):
            raise ValueError(f"{value!r} is not a job id")
        return value

    @field_validator("after")
    @classmethod
    def _after(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_AFTER:
            raise ValueError(
                f"names {len(value)} jobs; at most {MAX_AFTER} "
                "(chain them: make one job wait for the others)"
            )
        for ref in value:
            if not _NAME_OK.match(ref):
                raise ValueError(f"{ref!r} is not a job name or id")
        return value

    @field_validator("branch", "ref")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not _BRANCH_OK.match(value):
            raise ValueError(
                f"{value!r} is not a branch or ref hopper accepts "
                "(letters, digits, '.', '_', '-', '/'; no '..', no leading '-')"
            )
        return value


@dataclass(frozen=True)
class PromptSpec:
    """A parsed prompt: its options, its body, and where the body starts."""

    options: PromptOptions
    body: str
    body_line: int  # 1-based line number of the body's first line
    has_front_matter: bool

    @property
    def timeout_seconds(self) -> float | None:
        t = self.options.timeout
        return None if t is None else parse_positive_duration(t)

    @property
    def idle_timeout_seconds(self) -> float | None:
        t = self.options.idle_timeout
        return None if t is None else parse_positive_duration(t)

    def limit_bytes(
        self, key: Literal["memory_max", "output_max"], default: int | None
    ) -> int | None:
        """``memory_max`` / ``output_max`` in bytes: the front matter's, else ``default``.

        ``"none"`` in the front matter lifts the limit (None).
        """
        value = getattr(self.options, key)
        return default if value is None else parse_limit(value)


def decode(data: bytes) -> str:
    """UTF-8 text of a prompt, BOM stripped and CRLF normalised; raises BadPrompt."""
    if b"\x00" in data:
        raise BadPrompt(
            "contains NUL bytes: this looks like a binary file, not a prompt",
            hint="a prompt is UTF-8 Markdown text",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadPrompt(
            f"is not valid UTF-8 (byte {exc.start})",
            line=line,
            hint="save the file as UTF-8",
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse(data: bytes) -> PromptSpec:
    """Parse a prompt file's bytes. Raises :class:`BadPrompt` with a line and a hint."""
    text = decode(data)
    if not text.strip():
        raise BadPrompt("is empty", hint='write the task (or, for agent = "bash", the script)')
    lines = text.split("\n")
    first = lines[0].rstrip()
    if first == "---":
        raise BadPrompt(
            "starts with YAML front matter (---), which hopper does not read",
            line=1,
            hint="put TOML between +++ lines instead",
        )
    if first != FENCE:
        return PromptSpec(PromptOptions(), text, 1, has_front_matter=False)
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE)
    except StopIteration:
        raise BadPrompt(
            "front matter opened with +++ is never closed",
            line=1,
            hint="add a line with just +++ after the last key",
        ) from None
    raw = _load_toml("\n".join(lines[1:end]) + "\n", closing_line=end + 1)
    options = _validate(raw, lines[1:end])
    body = "\n".join(lines[end + 1 :])
    return PromptSpec(options, body, end + 2, has_front_matter=True)


def _load_toml(text: str, closing_line: int) -> dict[str, Any]:
    """``text`` is the front matter; ``closing_line`` the file line of the closing +++."""
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise BadPrompt(
            f"front matter is nested too deeply (at most {MAX_NESTING} levels)",
            line=2,
            hint='write keys as key = "value"; lists of strings, one table for env',
        ) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE.search(message)
        if match:
            line = int(match.group(1)) + 1  # +1 for the opening +++
            message = _TOML_LINE.sub(f"at line {line}", message)
        else:  # "at end of document": something left open runs into the closing +++
            line = closing_line
            message = message.replace("at end of document", "at the closing +++")
        raise BadPrompt(
            f"front matter is not valid TOML: {message}",
            line=line,
            hint='write keys as key = "value"',
        ) from None
    deepest = _nesting(raw)
    if deepest > MAX_NESTING:
        raise BadPrompt(
            f"front matter is nested {deepest} levels deep (at most {MAX_NESTING})",
            line=2,
            hint='write keys as key = "value"; lists of strings, one table for env',
        )
    return raw


def _nesting(value: object) -> int:
    """How deeply lists and tables nest in ``value`` (iterative: no recursion to exhaust)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_NESTING:
                return depth
            stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'timeout'?"`` for the known word closest to a typo, else ``""``."""
    close = get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _validate(raw: dict[str, Any], fm_lines: list[str]) -> PromptOptions:
    try:
        return PromptOptions.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        line = _key_line(key, fm_lines)
        if err["type"] == "extra_forbidden":
            known = ", ".join(PromptOptions.model_fields)
            raise BadPrompt(
                f"unknown key {key!r}{did_you_mean(key, PromptOptions.model_fields)}",
                line=line,
                hint=f"known keys: {known}",
            ) from None
        msg = str(err["msg"]).removeprefix("Value error, ")
        if key == "env" and len(err["loc"]) > 1:  # the variable's name, never its value
            msg = f"{err['loc'][1]!r}: {msg}"
        raise BadPrompt(f"key {key!r}: {msg}", line=line, hint=_KEY_HINTS.get(key, "")) from None


_KEY_HINTS = {
    "agent": 'for example agent = "bash"',
    "name": 'for example name = "fix-tests"',
    "workdir": 'an absolute path, for example workdir = "~/src/app"',
    "timeout": 'for example timeout = "45m", or a number of seconds more than 0',
    "idle_timeout": 'for example idle_timeout = "10m", or a number of seconds more than 0',
    "env": 'a table of strings, for example env = { MODE = "fast" }',
    "memory_max": 'for example memory_max = "2G" (K, M, G, T), or "none"',
    "output_max": 'for example output_max = "500M" (K, M, G, T), or "none"',
    "priority": "an integer from -1000 to 1000; higher starts first",
    "after": f'a list of at most {MAX_AFTER} job names or ids, for example after = ["migrate"]',
    "workspace": 'one of "none", "folder", "worktree"',
    "executor": 'one of "local", "slurm", "container"',
    "mode": 'agent jobs: "headless" (one run of the CLI) or "interactive" (a live session)',
    "image": 'container jobs: the image to run, for example image = "python:3.12-slim"',
    "mounts": 'container jobs: a list of "/host/path:/in/container[:ro]"',
    "network": 'container jobs: the engine\'s network, for example network = "none"',
    "cpus": "Slurm or container jobs: a whole number, for example cpus = 4",
    "mem": 'Slurm only: megabytes, or a size such as mem = "4G"',
    "gres": 'Slurm only: for example gres = "gpu:1"',
    "retry_of": "set by hopper retry: the id of the job this one re-runs",
    "max_cost_usd": "agent jobs: dollars, more than 0, for example max_cost_usd = 0.50",
    "max_tokens": "agent jobs: a whole number of tokens, for example max_tokens = 200000",
}


def _key_line(key: str, fm_lines: list[str]) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*[=.]")
    for i, text in enumerate(fm_lines):
        if pattern.match(text):
            return i + 2
    return None


def refuse_agent_only_keys(options: PromptOptions) -> None:
    """A bash job cannot be nudged nor spend tokens: ``check``, ``max_nudges``,
    ``on_idle = "nudge"``, ``max_cost_usd``, ``max_tokens`` are refused (BadPrompt)
    rather than silently ignored."""
    for key, given in (
        ("check", options.check is not None),
        ("max_nudges", options.max_nudges is not None),
        ("on_idle", options.on_idle == "nudge"),
        ("mode", options.mode == "interactive"),
        ("max_cost_usd", options.max_cost_usd is not None),
        ("max_tokens", options.max_tokens is not None),
    ):
        if given:
            if key in ("max_cost_usd", "max_tokens"):
                raise BadPrompt(
                    f"key {key!r} is for agent jobs (a bash job spends no tokens)",
                    hint="drop it, or use timeout to bound the script",
                )
            raise BadPrompt(
                f"key {key!r} is for agent jobs (a failed check or an idle agent is nudged "
                "to go on); a bash job cannot be nudged",
                hint="end the script with the check instead (its exit status decides), "
                'or use idle_timeout with on_idle = "abort"',
            )


def bash_script(spec: PromptSpec) -> str:
    """The script of a bash job: the first ```bash (or ```sh) block, else the whole body."""
    match = _BASH_BLOCK.search(spec.body)
    script = match.group(1) if match else spec.body
    if not script.strip():
        raise BadPrompt("has no script to run", hint="put the commands in the body")
    return script
