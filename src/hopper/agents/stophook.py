"""The Stop hook of an interactive agent: one marker file per finished turn.

Run by the agent CLI (Claude Code runs a hook's command through ``sh -c``), as
``python -I -S <this file>``: standard library only, no hopper import, so it
starts in a few tens of milliseconds. The CLI writes the hook's JSON on stdin
(``session_id``, ``transcript_path``, ``hook_event_name``,
``last_assistant_message`` …); this writes it, as it came (at most
``INPUT_CAP`` bytes), to ``$HOPPER_SESSION_DIR/markers/stop-<ns>-<pid>.json``
through a hidden temporary name and a rename, so a reader sees whole markers
only. Nothing a user wrote is in the hook's command line: the folder comes
from the environment the session host gave the CLI.

It prints nothing and exits 0 whatever happens (a Stop hook's output or exit
status 2 would steer the agent); a marker it could not write shows as a turn
the host ends from the session log instead.
"""

from __future__ import annotations

import os
import sys
import time

SESSION_DIR_VAR = "HOPPER_SESSION_DIR"
MARKERS = "markers"
INPUT_CAP = 1024 * 1024


def write_marker(folder: str, data: bytes) -> str:
    """Write ``data`` as the next marker in ``folder``/markers; its path."""
    markers = os.path.join(folder, MARKERS)
    os.makedirs(markers, mode=0o700, exist_ok=True)
    name = f"stop-{time.time_ns():020d}-{os.getpid()}.json"
    tmp = os.path.join(markers, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    final = os.path.join(markers, name)
    os.replace(tmp, final)
    return final


def main() -> int:
    folder = os.environ.get(SESSION_DIR_VAR)
    try:
        data = sys.stdin.buffer.read(INPUT_CAP)
        if folder:
            write_marker(folder, data)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
