"""``${job.id}``-style values in configured commands (agent ``args``, ``argv``, ``check``). Pure.

Only the known names below are replaced, inside each argument of an argv;
anything else (``$HOME``, ``${other}``) is left as written. The result is
still an argv: a value never becomes a shell word boundary, because there
is no shell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from hopper.core.record import JobRecord

_VAR = re.compile(r"\$\{([a-z_]+\.[a-z_]+)\}")


def template_values(record: JobRecord, workdir: Path) -> dict[str, str]:
    """The values a job's configured commands may use."""
    return {
        "job.id": record.id,
        "job.name": record.name,
        "job.group": record.group or "",
        "workspace.root": str(workdir),
        "workspace.branch": record.branch or "",
    }


def expand(text: str, values: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def expand_argv(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    return [expand(arg, values) for arg in argv]
