"""terminal.cast: the agent's raw terminal as asciicast v2, size-capped.

asciicast v2 (what ``asciinema play`` and the dashboard replay): a header
line ``{"version": 2, "width": W, "height": H, "timestamp": T, ...}``, then
one JSON array per line, ``[seconds since the start, "o", text]`` for output
(``"r"`` with ``"COLSxROWS"`` for a resize). The text is the terminal's
bytes decoded as UTF-8 (a character split across two reads is kept whole).

Capped like job.log's ``output_max``: once the file passes ``cast_max``
bytes, one last line says it was cut and nothing more is written (the turn
goes on; job.log keeps its readable text). Written through the run
directory's descriptor, never through a link (proc/rundir.py). Standard
library only.
"""

from __future__ import annotations

import codecs
import json
import os
import time

from hopper.proc.rundir import RunDir

DEFAULT_CAST_MAX = 32 * 1024 * 1024


class Cast:
    def __init__(
        self,
        files: RunDir,
        name: str,
        size: tuple[int, int],
        cap: int | None,
        start: float | None = None,
    ) -> None:
        rows, cols = size
        self.cap = DEFAULT_CAST_MAX if cap is None or cap <= 0 else cap
        self.start = time.monotonic() if start is None else start
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.fd = files.open_regular(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        self.size = 0
        self.cut = False
        header = {
            "version": 2,
            "width": cols,
            "height": rows,
            "timestamp": int(time.time()),
            "env": {"TERM": "xterm-256color"},
        }
        self._write(json.dumps(header).encode() + b"\n")

    def _write(self, line: bytes) -> None:
        try:
            os.write(self.fd, line)
            self.size += len(line)
        except OSError:
            self.cut = True  # disk full: the recording stops, the turn goes on

    def _event(self, kind: str, text: str, now: float | None) -> None:
        if self.cut or not text:
            return
        at = round((time.monotonic() if now is None else now) - self.start, 6)
        line = json.dumps([at, kind, text]).encode() + b"\n"
        if self.size + len(line) > self.cap:
            note = f"\r\n[hopper] terminal.cast cut at {self.cap} bytes\r\n"
            self._write(json.dumps([at, "o", note]).encode() + b"\n")
            self.cut = True
            return
        self._write(line)

    def output(self, data: bytes, now: float | None = None) -> None:
        self._event("o", self.decoder.decode(data), now)

    def resize(self, rows: int, cols: int, now: float | None = None) -> None:
        self._event("r", f"{cols}x{rows}", now)

    def close(self) -> None:
        self._event("o", self.decoder.decode(b"", final=True), None)
        try:
            os.close(self.fd)
        except OSError:
            pass
