"""One tail per followed file, read once and fanned out to every subscriber.

A :class:`Feed` follows one file of one job (job.log as text, events.jsonl as
JSON lines). It lives on the event loop: the hub calls :meth:`Feed.pump`
when inotify says the file changed, and the new bytes are read once, however
many browsers follow the job. A new subscriber first gets a bounded backlog
(the end of the file up to exactly where the feed has delivered), then the
live chunks: nothing is lost or repeated in between, as both happen on the
loop. A file replaced (a new inode, or shorter: a new attempt) starts over.

Every client's queue is bounded in bytes (``QUEUE_BYTES``), not messages:
JSON-escaping makes binary output up to six times its size, and a stalled
browser must cost a bounded amount however much a job writes. A subscriber
that would go over is dropped: its queue is emptied at once and it gets one
``reload`` message (the page reconnects and starts again from the backlog).
Log text is cut into messages of at most ``CHUNK_CHARS`` characters, so a
frame (sse.py) stays near ``FRAME_BYTES`` too.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hopper.store.saferead import UnreadableFile
from hopper.web.files import open_regular

BACKLOG_BYTES = 256 * 1024
PUMP_BYTES = 512 * 1024  # per read; escaped, at most 6 x that: well inside QUEUE_BYTES
CHUNK_CHARS = 32 * 1024  # of log text per message (at most ~192 KiB once escaped)
QUEUE_BYTES = 8 << 20  # what one client may have waiting, in bytes
CAST = "cast"  # the message of one terminal.cast record
HEADER_BYTES = 4096  # a cast header line longer than this is not looked for
RELOAD = "reload"  # the event that tells a dropped client to start again

Message = tuple[str, str]  # (SSE event name, data)


def size(message: Message) -> int:
    """A message's weight against ``QUEUE_BYTES`` (its text is ASCII: JSON-escaped)."""
    return len(message[0]) + len(message[1]) + 16


@dataclass(eq=False)
class Subscriber:
    queue: asyncio.Queue[Message | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    queued: int = 0  # bytes waiting in ``queue``

    def put(self, message: Message) -> None:
        if self.closed:
            return
        weight = size(message)
        if self.queued + weight > QUEUE_BYTES:
            self.drop("this client fell behind; reload to start again from the end")
            return
        self.queued += weight
        self.queue.put_nowait(message)

    def take(self) -> Message | None:
        """The next message (the queue is not empty); ``None`` ends the stream."""
        message = self.queue.get_nowait()
        if message is not None:
            self.queued -= size(message)
        return message

    def drop(self, reason: str) -> None:
        """Forget what is waiting (a stalled client holds no memory) and say reload."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued = 0
        self.close((RELOAD, json.dumps({"reason": reason})))

    def close(self, last: Message | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        if last is not None:
            self.queue.put_nowait(last)
        self.queue.put_nowait(None)


class Feed:
    def __init__(self, path: Path, *, lines: bool, event: str = "event") -> None:
        """``lines``: a JSON-lines file (events.jsonl, terminal.cast), each whole line
        sent as one ``event`` message (``"event"``: the objects; ``"cast"``: asciicast
        records, its header first on a cut backlog); else text sent as ``log``."""
        self.path = path
        self.lines = lines
        self.event = event
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
            if start > 0 and self.event == CAST:
                out.extend(_records(_first_line(fd_path=self.path), CAST))
            out.extend(_records(data.split(b"\n"), self.event))
        elif data:
            out.extend(_log(data.decode("utf-8", "replace")))
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
                out.extend(_records(buf[:cut].split(b"\n"), self.event))
                buf = buf[cut + 1 :]
            self.partial = buf
        else:
            out.extend(_log(self.decoder.decode(data)))
        return out

    def finish(self) -> Iterator[list[Message]]:
        """The rest of the file, one read at a time, then what a job's last, unterminated
        line held (one read's messages at a time: a 100 MB rest is never all in memory)."""
        yield self.pump()
        while self.more:
            yield self.pump()
        if self.lines:
            yield _records([self.partial], self.event)
            self.partial = b""
        else:
            yield _log(self.decoder.decode(b"", final=True))

    def broadcast(self, messages: list[Message]) -> None:
        for sub in list(self.subscribers):
            for message in messages:
                sub.put(message)
            if sub.closed:
                self.subscribers.discard(sub)


def _log(text: str) -> list[Message]:
    return [
        ("log", json.dumps(text[i : i + CHUNK_CHARS])) for i in range(0, len(text), CHUNK_CHARS)
    ]


def _records(lines: list[bytes], event: str) -> list[Message]:
    """Each whole JSON line as an ``event`` message: objects for events.jsonl; for a
    cast, its header (an object) and its ``[seconds, code, text]`` records."""
    out: list[Message] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # cut short by a crash: skipped, as every reader does
        if isinstance(record, dict) or (event == CAST and _cast_record(record)):
            out.append((event, json.dumps(record)))
    return out


def _cast_record(record: object) -> bool:
    return (
        isinstance(record, list)
        and len(record) == 3
        and isinstance(record[0], int | float)
        and isinstance(record[1], str)
        and isinstance(record[2], str)
    )


def _first_line(fd_path: Path) -> list[bytes]:
    """A cast's header line (its first, at most :data:`HEADER_BYTES`), for a backlog cut
    after it: the player needs the terminal's size."""
    try:
        fd = open_regular(fd_path)
    except (OSError, UnreadableFile):
        return []
    try:
        head = os.pread(fd, HEADER_BYTES, 0)
    finally:
        os.close(fd)
    return [head.split(b"\n", 1)[0]] if b"\n" in head else []
