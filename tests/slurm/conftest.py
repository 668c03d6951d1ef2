"""A private one-node Slurm cluster, started once per test session.

Skipped with the reason when Slurm is not installed or we are not root;
``HOPPER_REQUIRE_SLURM=1`` (set in CI) turns that skip into a failure, so the
Slurm tests can never silently stop running there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_cluster import SlurmCluster, missing_prerequisites, slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    reason = missing_prerequisites()
    if reason:
        if os.environ.get("HOPPER_REQUIRE_SLURM") == "1":
            pytest.fail(f"HOPPER_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    with slurm_cluster() as cluster:
        print(f"\nslurm test cluster up in {cluster.start_seconds:.2f}s (auth/{cluster.auth})")
        yield cluster
