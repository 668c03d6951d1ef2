"""Host paths <-> the paths a container job sees: the ``-v`` syntax and the mount map. Pure.

Theory of operation. A container sees only what is mounted into it, at the
places it is mounted. hopper hands a job paths (``HOPPER_RUN_DIR``, the
prompt file, the working directory, the script of a bash job); a host path
handed to a container names nothing there. So every container job gets a
:class:`MountMap` (:func:`plan`): the job's working directory at
:data:`WORKDIR_IN_CONTAINER`, its run directory at :data:`RUN_DIR_IN_CONTAINER`,
and the front matter's ``mounts``; and every path hopper hands the job goes
through :meth:`MountMap.to_container`, which picks the mount with the longest
host prefix (a run directory's ``work/`` inside the run directory maps to
``/work``, not ``/hopper/run/work``). A path under no mount is left as it is.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

WORKDIR_IN_CONTAINER = "/work"
RUN_DIR_IN_CONTAINER = "/hopper/run"
RESERVED = (WORKDIR_IN_CONTAINER, RUN_DIR_IN_CONTAINER)
MODES = ("ro", "rw")


class BadMount(ValueError):
    """A ``mounts`` entry that cannot be a bind mount; the message says what to write."""


@dataclass(frozen=True)
class Mount:
    host: str  # absolute, normalised
    container: str  # absolute, normalised
    read_only: bool = False

    def volume(self) -> str:
        """The ``-v`` argument: ``/host:/in/container`` (``:ro`` when read-only)."""
        return f"{self.host}:{self.container}" + (":ro" if self.read_only else "")


def _clean(path: str, what: str, text: str) -> str:
    if not path.startswith("/"):
        raise BadMount(f"{text!r}: the {what} path {path!r} is not absolute")
    if "\x00" in path or "," in path:
        raise BadMount(f"{text!r}: the {what} path may not contain ',' or a NUL character")
    parts = path.split("/")
    if ".." in parts:
        raise BadMount(f"{text!r}: the {what} path may not contain '..'")
    return posixpath.normpath(path).replace("//", "/")


def parse(text: str, home: str | None = None) -> Mount:
    """One ``mounts`` entry, ``/host/path:/in/container[:ro|:rw]``; raises :class:`BadMount`.

    ``~`` at the start of the host path is ``home`` when given (the caller's
    home directory: this module reads no environment).
    """
    fields = text.split(":")
    if len(fields) not in (2, 3):
        raise BadMount(
            f"{text!r} is not /host/path:/in/container[:ro] "
            "(paths with ':' cannot be mounted this way)"
        )
    host, container = fields[0], fields[1]
    mode = fields[2] if len(fields) == 3 else "rw"
    if mode not in MODES:
        raise BadMount(f"{text!r}: the mode {mode!r} is not one of ro, rw")
    if home is not None and (host == "~" or host.startswith("~/")):
        host = home + host[1:]
    host = _clean(host, "host", text)
    container = _clean(container, "container", text)
    if container == "/":
        raise BadMount(f"{text!r}: a mount cannot replace the container's root directory")
    for reserved in RESERVED:
        if _under(container, reserved) or _under(reserved, container):
            raise BadMount(
                f"{text!r}: {reserved} is where hopper mounts the job's "
                + ("working directory" if reserved == WORKDIR_IN_CONTAINER else "run directory")
                + "; mount it somewhere else"
            )
    return Mount(host, container, read_only=mode == "ro")


def _under(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or inside it (by whole path segments)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


@dataclass(frozen=True)
class MountMap:
    """The mounts of one container job, and the translation of host paths through them."""

    mounts: tuple[Mount, ...]

    def to_container(self, path: str) -> str | None:
        """Where the host ``path`` is inside the container; None if no mount holds it."""
        best: Mount | None = None
        for m in self.mounts:
            if _under(path, m.host) and (best is None or len(m.host) > len(best.host)):
                best = m
        if best is None:
            return None
        rest = path[len(best.host) :].lstrip("/")
        return posixpath.join(best.container, rest) if rest else best.container

    def translate(self, text: str) -> str:
        """``text`` if it is no host path under a mount, else its path in the container."""
        if not text.startswith("/"):
            return text
        inside = self.to_container(text)
        return text if inside is None else inside

    def volume_args(self) -> list[str]:
        """``-v host:container[:ro]`` for each mount, in order."""
        out: list[str] = []
        for m in self.mounts:
            out += ["-v", m.volume()]
        return out


def plan(workdir: str, run_dir: str, extra: tuple[Mount, ...] = ()) -> MountMap:
    """The mounts of a container job: its workdir, its run directory, then ``extra``.

    Raises :class:`BadMount` if the working directory or run directory cannot
    be written in ``-v`` syntax (a ':' or ',' in the path).
    """
    for what, path in (("working directory", workdir), ("run directory", run_dir)):
        if ":" in path or "," in path or not path.startswith("/"):
            raise BadMount(
                f"the {what} {path!r} cannot be mounted into a container "
                "(it must be absolute, without ':' or ',')"
            )
    base = (
        Mount(posixpath.normpath(run_dir), RUN_DIR_IN_CONTAINER),
        Mount(posixpath.normpath(workdir), WORKDIR_IN_CONTAINER),
    )
    return MountMap(base + tuple(extra))
