"""``python -I -m hopper.sessionhost``: a session host, detached from whoever started it.

The spec (:class:`hopper.sessionhost.host.HostSpec` as one JSON line) comes on
stdin; the host forks away into a session of its own, prints ``{"pid": N}``
on stdout and closes it, and serves until its session ends. The starter
(:func:`hopper.sessionhost.launch.launch`) waits for that line, with a
deadline, and for this first process's exit; the host is nobody's child.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from hopper.sessionhost.agentapi import InteractiveAgent
from hopper.sessionhost.launch import detach
from hopper.sessionhost.spec import HostSpec


def agent_for(spec: HostSpec) -> InteractiveAgent:
    """The interactive CLI of the job's agent spec (agents/interactive.py)."""
    module = importlib.import_module("hopper.agents.interactive")
    factory: Callable[[Any], InteractiveAgent] = module.agent_for
    return factory(spec.agent)


def main() -> int:
    line = sys.stdin.readline()
    if not line:
        return 2
    spec = HostSpec.from_dict(json.loads(line))
    return detach(spec, agent_for)


if __name__ == "__main__":
    sys.exit(main())
