"""The agent CLI's argument vector for one run. Pure: the standard library and hopper.core.

The prompt is never part of it: it goes on stdin (or, for a custom agent, in
the ``{prompt_file}`` it names).
"""

from __future__ import annotations

import os
from typing import Any

from hopper.core.mounts import Mount, MountMap


def build_argv(spec: dict[str, Any], session_id: str | None, resume: bool) -> list[str]:
    """The CLI's argv for one run of the driver ``spec`` (see ``hopper.agents.drive``)."""
    kind = spec["kind"]
    binary = str(spec["bin"])
    extra = [str(a) for a in spec.get("args") or []]
    if kind == "claude":
        # partial messages: text reaches job.log as it streams (2.1.197 and later)
        argv = [binary, "-p", "--output-format", "stream-json", "--verbose"]
        argv.append("--include-partial-messages")
        if spec.get("permission_mode"):
            argv += ["--permission-mode", str(spec["permission_mode"])]
        if spec.get("model"):
            argv += ["--model", str(spec["model"])]
        if session_id:
            argv += ["--resume" if resume else "--session-id", session_id]
        return argv + extra
    if kind == "codex":
        argv = [binary, "exec", "--json", "--skip-git-repo-check"]
        sandbox = spec.get("sandbox")
        if sandbox == "bypass":
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        elif sandbox:
            argv += ["-s", str(sandbox)]
        if spec.get("model"):
            argv += ["-m", str(spec["model"])]
        argv += extra
        if resume and session_id:
            argv += ["resume", session_id]
        return [*argv, "-"]
    # a custom agent: its argv template, placeholders filled (whole arguments only)
    values = {
        "prompt_file": str(spec.get("message_file") or spec["prompt_file"]),
        "workdir": str(spec["workdir"]),
        "run_dir": str(spec["run_dir"]),
        "session_id": session_id or "",
        "job_id": str(spec.get("job_id") or ""),
    }
    out: list[str] = []
    for arg in spec["argv"]:
        text = str(arg)
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        out.append(text)
    return out + extra


def in_container(argv: list[str], container: dict[str, Any]) -> list[str]:
    """``argv`` run in the job's container: the wrapper prefix, then ``argv`` with host
    paths translated through the job's mounts. A CLI found on the host by absolute path
    (not under a mount) is called by its bare name: the image has its own copy on PATH."""
    mmap = MountMap(tuple(Mount(str(h), str(c)) for h, c in container["mounts"]))
    inside = [mmap.translate(a) for a in argv]
    if inside and inside[0] == argv[0] and argv[0].startswith("/"):
        inside[0] = os.path.basename(argv[0])
    return [*(str(a) for a in container["prefix"]), *inside]
