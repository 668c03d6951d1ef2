"""One tail per followed file, read once and fanned out to every subscriber.

A :class:`Feed` follows one file of one job (job.log as text, events.jsonl as
JSON lines). It lives on the event loop: the hub calls :meth:`Feed.pump`
when inotify says the file changed, and the new bytes are read once, however
many browsers follow the job. A new subscriber first gets a bounded backlog
(the end of the file up to exactly where the feed has delivered), then the
live chunks: nothing is lost or repeated in between, as both happen on the
loop. A file replaced (a new inode, or shorter: a new attempt) starts over.

A subscriber whose queue backs up (a stalled browser) is dropped with a
``lagging`` message rather than buffered without bound; the page reconnects.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from hopper.store.saferead import UnreadableFile
from hopper.web.files import open_regular

BACKLOG_BYTES = 256 * 1024
PUMP_BYTES = 1 << 20
QUEUE_MAX = 1024

Message = tuple[str, str]  # (SSE event name, data)


@dataclass(eq=False)
class Subscriber:
    queue: asyncio.Queue[Message | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def put(self, message: Message) -> None:
        if self.closed:
            return
        if self.queue.qsize() >= QUEUE_MAX:
            self.close(("lagging", "{}"))
            return
        self.queue.put_nowait(message)

    def close(self, last: Message | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        if last is not None:
            self.queue.put_nowait(last)
        self.queue.put_nowait(None)


class Feed:
    def __init__(self, path: Path, *, lines: bool) -> None:
        self.path = path
        self.lines = lines
        self.offset = 0  # bytes read from the file
        self.ino: int | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.partial = b""  # lines mode: an unterminated last line
        self.subscribers: set[Subscriber] = set()
        self.more = False  # the last pump stopped at PUMP_BYTES
        try:
            fd = open_regular(path)
        except (OSError, UnreadableFile):
            return
        try:
            st = os.fstat(fd)
            self.offset, self.ino = st.st_size, st.st_ino
        finally:
            os.close(fd)

    @property
    def delivered(self) -> int:
        """The file offset up to which every subscriber has been sent everything."""
        held = len(self.partial) if self.lines else len(self.decoder.getstate()[0])
        return self.offset - held

    def backlog(self) -> list[Message]:
        end = self.delivered
        start = max(0, end - BACKLOG_BYTES)
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            return [("start", json.dumps({"cut": False}))]
        except (OSError, UnreadableFile) as exc:
            return [("problem", json.dumps(str(exc)))]
        try:
            data = os.pread(fd, end - start, start) if end > start else b""
        finally:
            os.close(fd)
        if start > 0:
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut >= 0 else b""
        out: list[Message] = [("start", json.dumps({"cut": start > 0}))]
        if self.lines:
            out.extend(_events(data.split(b"\n")))
        elif data:
            out.append(("log", json.dumps(data.decode("utf-8", "replace"))))
        return out

    def pump(self) -> list[Message]:
        """Read what was added since the last pump; the messages to send."""
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            return []
        except (OSError, UnreadableFile) as exc:
            return [("problem", json.dumps(str(exc)))]
        out: list[Message] = []
        try:
            st = os.fstat(fd)
            if (self.ino is not None and st.st_ino != self.ino) or st.st_size < self.offset:
                self.offset, self.partial = 0, b""
                self.decoder.reset()
                out.append(("reset", "{}"))
            self.ino = st.st_ino
            data = os.pread(fd, PUMP_BYTES, self.offset)
        finally:
            os.close(fd)
        self.offset += len(data)
        self.more = len(data) == PUMP_BYTES
        if self.lines:
            buf = self.partial + data
            cut = buf.rfind(b"\n")
            if cut >= 0:
                out.extend(_events(buf[:cut].split(b"\n")))
                buf = buf[cut + 1 :]
            self.partial = buf
        else:
            text = self.decoder.decode(data)
            if text:
                out.append(("log", json.dumps(text)))
        return out

    def finish(self) -> list[Message]:
        """The end of the file: what a job's last, unterminated line held."""
        out = self.pump()
        while self.more:
            out.extend(self.pump())
        if self.lines:
            out.extend(_events([self.partial]))
            self.partial = b""
        else:
            text = self.decoder.decode(b"", final=True)
            if text:
                out.append(("log", json.dumps(text)))
        return out

    def broadcast(self, messages: list[Message]) -> None:
        for sub in list(self.subscribers):
            for message in messages:
                sub.put(message)
            if sub.closed:
                self.subscribers.discard(sub)


def _events(lines: list[bytes]) -> list[Message]:
    out: list[Message] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue  # cut short by a crash: skipped, as every reader does
        if isinstance(event, dict):
            out.append(("event", json.dumps(event)))
    return out
