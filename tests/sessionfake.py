"""A fake interactive agent for the session host's tests: a real CLI in a real pty.

``python sessionfake.py cli [--resume ID]`` is the "agent": raw terminal, a
``READY> `` prompt, messages typed as a bracketed paste and Enter. It answers
``answer: TEXT``, appends Claude-shaped entries to
``$HOPPER_SESSION_DIR/fake.log.jsonl`` and, as a Stop hook would, writes a
marker into ``$HOPPER_SESSION_DIR/markers/``. Special messages: ``slow``
ticks until Esc; ``hang`` never answers (``hang-once`` answers in a resumed
agent); ``quiet TEXT`` answers without a
marker (the session log must end the turn); ``hooked TEXT`` answers in the
Stop hook's marker only, never in the log; ``spend N`` logs a tool call
that used N output tokens (model ``fake-model``) and then ticks until Esc
(a turn still going when its spend is known); ``fails N STATUS ...`` ends
its reply with an API error (HTTP ``STATUS``, logged as Claude Code 2.1.330
logs one: no marker) the first N times it is typed, then answers; ``exit``
exits; ``eat N`` holds N MiB; ``stall`` is silent (no output, nothing logged)
until a message is typed meanwhile, which it queues; then it answers, shows its
prompt, and after a second of silence answers the queued message as a turn of its
own (as Claude does with a message typed while it works). ``python sessionfake.py
host`` is a host process with :class:`FakeAgent` (the spec on stdin, as ``python -m
hopper.sessionhost``).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import tty
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"


@dataclass(frozen=True)
class FakeSlice:
    entries: list[dict[str, Any]]
    offset: int
    session_id: str | None = None


@dataclass
class FakeAgent:
    session_dir: Path = field(default_factory=Path)

    def prepare(self, session_dir: Path, workdir: Path, env: Mapping[str, str]) -> None:
        self.session_dir = session_dir
        (session_dir / "markers").mkdir(exist_ok=True)

    def argv(self, resume_id: str | None) -> list[str]:
        return [sys.executable, str(HERE), "cli", *(["--resume", resume_id] if resume_id else [])]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, "HOPPER_SESSION_DIR": str(self.session_dir)}

    def ready(self, screen_tail: bytes) -> bool:
        return screen_tail.endswith(b"READY> ")

    def type_prompt(self, text: str) -> bytes:
        return PASTE_START + text.encode() + PASTE_END + b"\r"

    def interrupt_keys(self) -> bytes:
        return b"\x1b"

    def markers(self, session_dir: Path) -> list[Path]:
        try:
            return sorted((session_dir / "markers").iterdir())
        except OSError:
            return []

    def stop_answer(self, marker: Path) -> str | None:
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None  # the markers of most messages hold the session id only
        answer = data.get("last_assistant_message") if isinstance(data, dict) else None
        return answer if isinstance(answer, str) else None

    def read_log(self, session_id: str | None, offset: int) -> FakeSlice:
        path = self.session_dir / "fake.log.jsonl"
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return FakeSlice([], offset)
        whole = data[: data.rfind(b"\n") + 1]
        entries = [json.loads(line) for line in whole.splitlines() if line.strip()]
        return FakeSlice(entries, offset + len(whole))


# -- the fake CLI ------------------------------------------------------------------
def _out(text: str) -> None:
    os.write(1, text.encode())


def _log(entry: dict[str, Any]) -> None:
    with open(Path(os.environ["HOPPER_SESSION_DIR"]) / "fake.log.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def _answer(sid: str, n: int, text: str, marker: bool) -> None:
    reply = f"answer: {text}"
    _out(f"\r\n{reply}\r\n")
    _log({"type": "user", "sessionId": sid, "message": {"content": text}})
    usage = {"input_tokens": 10, "output_tokens": len(text)}
    message = {
        "id": f"m{os.getpid()}-{n}",
        "content": [{"type": "text", "text": reply}],
        "usage": usage,
    }
    _log({"type": "assistant", "sessionId": sid, "message": message})
    if marker:
        folder = Path(os.environ["HOPPER_SESSION_DIR"]) / "markers"
        (folder / f"{time.time_ns()}-{n}.done").write_text(sid)


def _hooked(sid: str, text: str) -> None:
    """An answer shown and carried by the Stop hook's marker, but never logged (Claude
    Code 2.1.197 at times)."""
    reply = f"answer: {text}"
    _out(f"\r\n{reply}\r\n")
    _log({"type": "user", "sessionId": sid, "message": {"content": text}})
    folder = Path(os.environ["HOPPER_SESSION_DIR"]) / "markers"
    payload = {"session_id": sid, "last_assistant_message": reply}
    (folder / f"{time.time_ns()}-hooked.done").write_text(json.dumps(payload))


API_ERRORS = {429: "rate_limit", 401: "authentication_failed", 500: "server_error"}


def _api_error(sid: str, n: int, text: str, status: int) -> None:
    shown = f"API Error: Request rejected ({status}) · scripted error {status}"
    _out(f"\r\n{shown}\r\n")
    _log({"type": "user", "sessionId": sid, "message": {"content": text}})
    message = {
        "id": f"m{os.getpid()}-{n}",
        "model": "<synthetic>",
        "content": [{"type": "text", "text": shown}],
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    entry = {"type": "assistant", "sessionId": sid, "message": message, "isApiErrorMessage": True}
    _log({**entry, "error": API_ERRORS.get(status, "unknown"), "apiErrorStatus": status})


def _spend(sid: str, n: int, tokens: int) -> None:
    """A tool call mid-turn whose usage is in the log before the turn could end."""
    _log({"type": "user", "sessionId": sid, "message": {"content": f"spend {tokens}"}})
    message = {
        "id": f"m{os.getpid()}-{n}",
        "model": "fake-model",
        "content": [{"type": "tool_use", "name": "Bash", "input": {"command": "make"}}],
        "usage": {"input_tokens": 10, "output_tokens": tokens},
    }
    _log({"type": "assistant", "sessionId": sid, "message": message})
    _slow()


def _slow() -> None:
    while True:
        ready, _, _ = select.select([0], [], [], 0.1)
        if ready and b"\x1b" in os.read(0, 1024):
            _out("\r\nInterrupted\r\n")
            return
        _out("tick ")


def _stall() -> str:
    """Silent until a message is typed (a paste and Enter, echoed in the input box): it."""
    buf = b""
    while b"\r" not in buf:
        chunk = os.read(0, 4096)
        buf += chunk
        os.write(1, chunk.replace(PASTE_START, b"").replace(PASTE_END, b"").split(b"\r")[0])
    # The fake agent's own behaviour, not a test's wait: it takes a moment before it
    # answers the first message, as a model does (tests wait on its session log).
    time.sleep(0.3)
    line = buf.split(b"\r")[0]
    return line.replace(PASTE_START, b"").replace(PASTE_END, b"").decode().strip()


def cli(argv: list[str]) -> int:
    tty.setraw(0)
    resume = argv[argv.index("--resume") + 1] if "--resume" in argv else None
    sid = resume or f"fake-{os.getpid()}"
    if resume:
        _out(f"resumed {resume}\r\n")
    hold: list[bytes] = []
    typed: dict[str, int] = {}  # times each message was typed
    n = 0
    buf = b""
    _out("READY> ")
    while True:
        chunk = os.read(0, 4096)
        if not chunk:
            return 0
        buf += chunk
        shown = chunk.split(b"\r")[0].replace(PASTE_START, b"").replace(PASTE_END, b"")
        if shown and not shown.startswith(b"\x1b"):
            os.write(1, shown)  # the echo a TUI draws of what was typed
        while b"\r" in buf:
            line, _, buf = buf.partition(b"\r")
            text = line.replace(PASTE_START, b"").replace(PASTE_END, b"").decode().strip()
            n += 1
            typed[text] = typed.get(text, 0) + 1
            if text == "exit":
                _out("\r\nbye\r\n")
                return 0
            if text == "slow":
                _slow()
            elif text.startswith("spend "):
                _spend(sid, n, int(text.split()[1]))
            elif text == "hang":
                continue  # never answers, never READY again
            elif text == "hang-once" and not resume:
                continue  # never answers; answers in a resumed agent (on_dead)
            elif text.startswith("eat "):
                hold.append(b"x" * (int(text.split()[1]) * 1024 * 1024))
                _answer(sid, n, text, marker=True)
            elif text.startswith("fails ") and typed[text] <= int(text.split()[1]):
                _api_error(sid, n, text, int(text.split()[2]))
            elif text.startswith("quiet "):
                _answer(sid, n, text, marker=False)
            elif text.startswith("hooked "):
                _hooked(sid, text)
            elif text == "stall":
                queued = _stall()
                _answer(sid, n, text, marker=True)
                _out("READY> ")
                # Quiet at its prompt for a second with a message still queued: the gap
                # a host must not type into (the nudge-wait test fails without that fix).
                time.sleep(1.0)
                n += 1
                _answer(sid, n, queued, marker=True)
            else:
                _answer(sid, n, text, marker=True)
            _out("READY> ")


def host() -> int:
    sys.path.insert(0, str(HERE.parent.parent / "src"))
    from hopper.sessionhost.host import HostSpec
    from hopper.sessionhost.launch import detach

    spec = HostSpec.from_dict(json.loads(sys.stdin.readline()))
    return detach(spec, lambda _spec: FakeAgent())


if __name__ == "__main__":
    if sys.argv[1] == "cli":
        sys.exit(cli(sys.argv[2:]))
    sys.exit(host())
