"""Bash jobs: the body (or its first ```bash block) is the script, run as ``bash FILE``."""

from __future__ import annotations

import signal

from hopper.agents.base import JobContext, Preparation
from hopper.core.prompt import bash_script

SCRIPT_FILE = "script.sh"


class BashAgent:
    name = "bash"

    def prepare(self, job: JobContext) -> Preparation:
        script = bash_script(job.spec)
        path = job.run_dir / SCRIPT_FILE
        return Preparation(
            argv=["bash", "--noprofile", "--norc", str(path)],
            files={SCRIPT_FILE: script},
            stop_signals=[signal.SIGTERM],
            idle_timeout=job.spec.idle_timeout_seconds,
        )
