"""What a job asks of Slurm (``cpus``, ``mem``, ``gres``): merged, validated, as sbatch options.

Pure: the front matter's values, else the ``[slurm]`` defaults, checked here
so a bad value fails at claim as a clear bad prompt rather than as an sbatch
error; each becomes a single argv element (``--mem=4G``), never shell text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

from hopper.core.prompt import BadPrompt, PromptSpec

_MEM = re.compile(r"[1-9]\d*[KMGT]?", re.IGNORECASE)
_GRES = re.compile(r"[A-Za-z][\w.\-]*(:[\w.\-]+)*(,[A-Za-z][\w.\-]*(:[\w.\-]+)*)*")
RESOURCES = ("cpus", "mem", "gres")


class ResourceError(ValueError):
    """A resource in the front matter sbatch would not accept; the message says which."""


class SlurmDefaults(Protocol):
    """The ``[slurm]`` defaults a job's request falls back on (config.SlurmConfig)."""

    @property
    def cpus(self) -> int | None: ...
    @property
    def mem(self) -> int | str | None: ...
    @property
    def gres(self) -> str | None: ...


def resource_args(resources: Mapping[str, object]) -> list[str]:
    """``{"cpus": 2, "mem": "4G", "gres": "gpu:1"}`` -> sbatch options, validated."""
    unknown = sorted(set(resources) - set(RESOURCES))
    if unknown:
        raise ResourceError(
            f"unknown Slurm resource {', '.join(unknown)}: use {', '.join(RESOURCES)}"
        )
    args: list[str] = []
    cpus = resources.get("cpus")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | str) or not str(cpus).isdigit():
            raise ResourceError(f"cpus must be a whole number, not {cpus!r}")
        if int(cpus) < 1:
            raise ResourceError(f"cpus must be at least 1, not {cpus!r}")
        args.append(f"--cpus-per-task={int(cpus)}")
    mem = resources.get("mem")
    if mem is not None:
        text = str(mem) if isinstance(mem, int) and not isinstance(mem, bool) else mem
        if not isinstance(text, str) or not _MEM.fullmatch(text):
            raise ResourceError(f"mem must be megabytes or a size such as 512M or 4G, not {mem!r}")
        args.append(f"--mem={text.upper()}")
    gres = resources.get("gres")
    if gres is not None:
        if not isinstance(gres, str) or not _GRES.fullmatch(gres):
            raise ResourceError(f"gres must look like gpu:1 or gpu:a100:2, not {gres!r}")
        args.append(f"--gres={gres}")
    return args


def slurm_request(executor: str, spec: PromptSpec, defaults: SlurmDefaults) -> dict[str, int | str]:
    """The resources a job asks of Slurm: front matter, else ``[slurm]``; validated.

    ``cpus``, ``mem`` and ``gres`` on a local job are an error (a bad prompt),
    not silently ignored: the job would not get what it asked for.
    """
    opts = spec.options
    asked: dict[str, int | str] = {}
    for key in RESOURCES:
        value = getattr(opts, key)
        if value is not None:
            asked[key] = value
    if executor != "slurm":
        if executor == "container":
            asked.pop("cpus", None)  # the engine's --cpus (executors/container.py)
        if asked:
            raise BadPrompt(
                f"{', '.join(asked)} only apply to Slurm jobs",
                hint='add executor = "slurm", or remove them',
            )
        return {}
    merged = dict(asked)
    for key in RESOURCES:
        default = getattr(defaults, key)
        if key not in merged and default is not None:
            merged[key] = default
    try:
        resource_args(merged)
    except ResourceError as exc:
        raise BadPrompt(str(exc), hint="see docs/slurm.md") from None
    return merged
