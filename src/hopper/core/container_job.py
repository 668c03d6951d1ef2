"""What a container job runs in: front matter, else ``[container]``. Pure.

Checked at admission, so an unusable request fails at claim as a bad prompt:
``image``, ``mounts`` and ``network`` on a job of another executor are an
error, not silently ignored (the job would not run where it asked to).
"""

from __future__ import annotations

from typing import Protocol

from hopper.core.prompt import BadPrompt, PromptSpec
from hopper.core.record import ContainerJob

NAME_PREFIX = "hopper-"


class ContainerDefaults(Protocol):
    """The ``[container]`` defaults a job falls back on (config.ContainerConfig)."""

    @property
    def image(self) -> str | None: ...


def container_name(job_id: str) -> str:
    return NAME_PREFIX + job_id


def container_request(
    executor: str, spec: PromptSpec, defaults: ContainerDefaults, job_id: str
) -> ContainerJob | None:
    """What a container job runs in (front matter, else ``[container]``); BadPrompt if unusable.

    ``image``, ``mounts`` and ``network`` on a job of another executor are an
    error, not silently ignored: the job would not run where it asked to.
    """
    opts = spec.options
    given = [k for k in ("image", "mounts", "network") if getattr(opts, k) is not None]
    if executor != "container":
        if given:
            raise BadPrompt(
                f"{', '.join(given)} only apply to container jobs",
                hint='add executor = "container", or remove them',
            )
        return None
    image = opts.image or defaults.image
    if image is None:
        raise BadPrompt(
            "a container job needs an image",
            hint='add image = "…" to the front matter, or [container] image to the config',
        )
    return ContainerJob(
        name=container_name(job_id),
        image=image,
        mounts=list(opts.mounts or []),
        network=opts.network,
        cpus=opts.cpus,
    )
