"""Job ids: unique across watchers and hosts, sortable by claim time, safe as a file name.

Shape: ``YYYYMMDD-HHMMSS-mmm-<slug>-<4 hex>``, e.g. ``20261122-133540-042-fix-tests-3f9a``.
Uniqueness is finally enforced by ``mkdir`` of the run directory; the random
suffix only makes a clash unlikely.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime

_NOT_SLUG = re.compile(r"[^a-z0-9]+")
SLUG_MAX = 40


def slugify(name: str) -> str:
    """Lower-case ASCII letters, digits and single dashes; never empty."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = _NOT_SLUG.sub("-", ascii_name.lower()).strip("-")[:SLUG_MAX].strip("-")
    return slug or "job"


def make_job_id(now: datetime, name: str, token: str) -> str:
    """``now`` in UTC, the job's ``name``, ``token`` a short random hex string."""
    stamp = now.strftime("%Y%m%d-%H%M%S")
    millis = now.microsecond // 1000
    return f"{stamp}-{millis:03d}-{slugify(name)}-{token}"


def prompt_stem(filename: str) -> str:
    """``fix tests.prompt.md`` -> ``fix tests``."""
    return filename[: -len(".prompt.md")] if filename.endswith(".prompt.md") else filename
