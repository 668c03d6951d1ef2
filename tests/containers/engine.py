"""The test engine and image: podman with runc, busybox imported locally (no registry).

The image is ``podman import`` of a tarball holding /bin/busybox (Debian's
busybox-static) and its applet links, plus a ``bash`` that runs busybox sh
(hopper runs a bash job as ``bash --noprofile --norc script.sh``). Built once
per session. Without podman the tests skip with the reason; under ``CI=true``
they fail instead, so they can never silently stop running there.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

from hopper.store.layout import Layout

# On these machines (Debian podman, hybrid cgroups, a low hard nofile limit) crun is refused
# and setrlimit above the current limits fails: runc, and ulimits we may set.
ENGINE = ["podman", "--runtime", "runc"]
RUN_ARGS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
IMAGE = "localhost/hopper-test-busybox:1"
NO_BASH_IMAGE = "localhost/hopper-test-busybox-nobash:1"  # busybox alone, like alpine
BUSYBOX = Path("/bin/busybox")
BASH = b"""#!/bin/sh
# hopper runs a bash job as: bash --noprofile --norc SCRIPT
while [ "${1#--}" != "$1" ]; do shift; done
exec /bin/sh "$@"
"""


def container_config(extra: str = "", engine: list[str] | None = None) -> str:
    argv = ", ".join(f'"{a}"' for a in (engine or ENGINE))
    run_args = ", ".join(f'"{a}"' for a in RUN_ARGS)
    return (
        'executor = "container"\n'
        f"{extra}"
        f'\n[container]\nengine = [{argv}]\nrun_args = [{run_args}]\nimage = "{IMAGE}"\n'
    )


def podman_missing() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc busybox-static)"
    if shutil.which("runc") is None:
        return "runc is not installed (apt-get install runc)"
    if not BUSYBOX.is_file():
        return "/bin/busybox is missing (apt-get install busybox-static)"
    return None


def image_tar(bash: bool = True) -> bytes:
    """/bin/busybox, a link per applet, /bin/bash (unless not ``bash``), /tmp: the image."""
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("bin", "tmp", "etc"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(BUSYBOX), arcname="bin/busybox")
        for name in applets:
            if name in ("busybox", "bash"):
                continue
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        if bash:
            script = tarfile.TarInfo("bin/bash")
            script.size, script.mode = len(BASH), 0o755
            tar.addfile(script, io.BytesIO(BASH))
    return buf.getvalue()


def containers_of(layout: Layout) -> list[str]:
    """Containers (any state) named after a job of this root."""
    ids = [d.name for d in layout.runs.iterdir() if not d.name.startswith(".")]
    if not ids:
        return []
    out = subprocess.run(
        [*ENGINE, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [name for name in out if name.removeprefix("hopper-") in ids]
