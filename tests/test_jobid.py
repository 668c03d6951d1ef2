"""core/jobid.py: ids sort by time, are safe file names, and the slug is never empty."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper.core.jobid import SLUG_MAX, make_job_id, prompt_stem, slugify

T0 = datetime(2026, 11, 22, 13, 35, 40, 42_000, tzinfo=UTC)
ID_SHAPE = re.compile(r"^\d{8}-\d{6}-\d{3}-[a-z0-9]+(?:-[a-z0-9]+)*-[0-9a-f]{4}$")


def test_example_shape() -> None:
    assert make_job_id(T0, "fix tests", "3f9a") == "20261122-133540-042-fix-tests-3f9a"


def test_ids_sort_by_time_whatever_the_name() -> None:
    names = ["zzz", "aaa", "Ünïcode", "0", "", "~~~"]
    ids = [make_job_id(T0 + timedelta(milliseconds=i * 7), n, "ffff") for i, n in enumerate(names)]
    assert ids == sorted(ids)


@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2999, 1, 1)),
    st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=400)),
    st.text(),
    st.text(),
)
def test_later_claims_sort_later(t: datetime, dt: timedelta, a: str, b: str) -> None:
    assert make_job_id(t, a, "ffff") < make_job_id(t + dt, b, "0000")


NASTY = [
    "fix tests",
    "ünïcödé naïve café",
    "日本語のプロンプト",
    "emoji 🚀🔥",
    "line\nbreak",
    "tab\tand\rcr",
    "../../etc/passwd",
    "/abs/path",
    ".hidden",
    "-leading-dash",
    "x" * 300,
    "é" * 300,
    "",
    "   ",
    "---",
    "\x00nul",
    "$(rm -rf /) `id` ; |",
]


@pytest.mark.parametrize("name", NASTY, ids=lambda n: repr(n)[:30])
def test_id_is_a_safe_file_name(name: str) -> None:
    job_id = make_job_id(T0, name, "abcd")
    assert ID_SHAPE.match(job_id), job_id
    assert "/" not in job_id and not job_id.startswith(".")
    assert len(job_id.encode()) <= 255
    assert job_id.isascii() and job_id.isprintable()


@given(st.text())
def test_slug_never_empty_and_safe(name: str) -> None:
    slug = slugify(name)
    assert slug
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", slug), slug
    assert len(slug) <= SLUG_MAX


@pytest.mark.parametrize(
    ("name", "slug"), [("", "job"), ("日本語", "job"), ("Café Crème", "cafe-creme")]
)
def test_slug_examples(name: str, slug: str) -> None:
    assert slugify(name) == slug


def test_prompt_stem() -> None:
    assert prompt_stem("fix tests.prompt.md") == "fix tests"
    assert prompt_stem("a.b.prompt.md") == "a.b"
    assert prompt_stem("notes.md") == "notes.md"
