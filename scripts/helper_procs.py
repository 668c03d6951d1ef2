"""Which processes are hopper's per-job helpers: its fork server and supervisors.

Imported by path by scripts/bench (section 3: their memory per running job)
and scripts/uss-probe (each puts this folder on sys.path). A watcher's
children are its fork server, whose children are the supervisors (spares
included), or, where no fork server runs, supervisors it booted itself.
"""

from __future__ import annotations

import psutil


def hopper_helpers(watcher: int) -> list[tuple[str, psutil.Process]]:
    """("server" | "supervisor", process) for each of ``watcher``'s helpers; a
    process that goes away while it is looked at is left out."""
    found: list[tuple[str, psutil.Process]] = []
    for child in psutil.Process(watcher).children():
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if any(a.endswith("forkserver.py") for a in argv):
            found.append(("server", child))
            try:
                found.extend(("supervisor", c) for c in child.children())
            except psutil.Error:
                continue
        elif any(a.endswith("supervise.py") for a in argv):
            found.append(("supervisor", child))
    return found
