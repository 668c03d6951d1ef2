"""Container jobs against real podman, with a test image built locally (no registry).

The image (tests/containers/engine.py) is built once per session. Without podman
the tests skip with the reason; under ``CI=true`` they fail instead, so they can
never silently stop running there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from containers.engine import (
    ENGINE,
    IMAGE,
    NO_BASH_IMAGE,
    containers_of,
    image_tar,
    podman_missing,
)
from hopper.store.layout import Layout


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    reason = podman_missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    tar = tmp_path_factory.mktemp("image") / "busybox.tar"
    tar.write_bytes(image_tar())
    subprocess.run([*ENGINE, "import", str(tar), IMAGE], capture_output=True, check=True)
    return IMAGE


@pytest.fixture(scope="session")
def image_without_bash(image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test image without /bin/bash: busybox's sh only, as in busybox or alpine."""
    tar = tmp_path_factory.mktemp("image") / "nobash.tar"
    tar.write_bytes(image_tar(bash=False))
    subprocess.run([*ENGINE, "import", str(tar), NO_BASH_IMAGE], capture_output=True, check=True)
    return NO_BASH_IMAGE


@pytest.fixture
def no_containers_left(layout: Layout, image: str) -> Iterator[None]:
    """After the test, no container of its jobs is left, whatever the outcome."""
    yield
    left = containers_of(layout)
    for name in left:
        subprocess.run([*ENGINE, "rm", "-f", name], capture_output=True, check=False)
    assert not left, f"containers left behind: {left}"
