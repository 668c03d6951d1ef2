"""The hot path's paths taken from strings give what the Path objects gave.

``plain_parts``, ``plain_name``, ``Layout.relative``, ``Layout.processed_rel``
and finalize's candidates skip building a Path when the string is already in
its normal form (as hopper records paths). On any string made of path-like
pieces — empty parts, ``.``, ``..``, a leading slash, a trailing one, bytes
escaped from a non-UTF-8 name, long names — each must equal the Path answer.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopper.core.routing import plain_name, plain_parts, subpath
from hopper.store.finalize import _candidates, _candidates_parsed
from hopper.store.layout import Layout

pieces = st.sampled_from(
    ["", ".", "..", "inbox", "processed", "a", "b c", "x.prompt.md", "\udcff.prompt.md", "é" * 90]
)
rels = st.lists(pieces, min_size=0, max_size=5).map("/".join)
ids = st.sampled_from(["20261126-190000-000001-x-abcd", "a/b", ".", "x"])


@settings(max_examples=400, deadline=None)
@given(rels)
def test_parts_and_names_as_pathlib(rel: str) -> None:
    assert plain_parts(rel) == PurePosixPath(rel).parts
    assert plain_name(rel) == PurePosixPath(rel).name
    parts = PurePosixPath(rel).parts
    assert subpath(rel) == tuple((parts[1:] if parts[:1] == ("inbox",) else parts)[:-1])


@settings(max_examples=400, deadline=None)
@given(rels, st.sampled_from(["/", "/tmp/root", "/tmp/root/"]))
def test_relative_as_relative_to(rel: str, root: str) -> None:
    layout = Layout(Path(root))
    path = Path(root) / rel
    try:
        expected: str | None = str(path.relative_to(layout.root))
    except ValueError:
        expected = None
    try:
        got: str | None = layout.relative(path)
    except ValueError:
        got = None
    assert got == expected


def pathlib_processed_rel(root: Path, inbox_rel: str, job_id: str) -> str:
    """The naming rule as Layout.processed_path stated it with pathlib before
    processed_rel became its one home; frozen here as the oracle."""
    rel = Path(inbox_rel)
    sub = rel.parent.relative_to("inbox") if rel.parts[:1] == ("inbox",) else Path()
    stem = rel.name[: -len(".prompt.md")] if rel.name.endswith(".prompt.md") else rel.name
    data = stem.encode("utf-8", "surrogateescape")
    if len(data) > 120:
        stem = data[:120].decode("utf-8", "ignore")
    return str((root / "processed" / sub / f"{stem}.{job_id}.prompt.md").relative_to(root))


@settings(max_examples=400, deadline=None)
@given(rels, ids)
def test_processed_rel_as_the_path(rel: str, job_id: str) -> None:
    layout = Layout(Path("/tmp/root"))
    try:
        expected: str | None = pathlib_processed_rel(layout.root, rel, job_id)
    except ValueError:
        expected = None
    try:
        got: str | None = layout.processed_rel(rel, job_id)
    except ValueError:
        got = None
    assert got == expected
    if got is not None:
        assert layout.processed_path(rel, job_id) == layout.root / got


ID = "20261126-190000-000001-x-abcd"


@pytest.mark.parametrize(
    ("inbox_rel", "job_id", "expected"),
    [
        ("inbox/team/a/fix.prompt.md", ID, f"processed/team/a/fix.{ID}.prompt.md"),
        ("inbox/x.prompt.md", ID, f"processed/x.{ID}.prompt.md"),
        ("inbox/notes.txt", ID, f"processed/notes.txt.{ID}.prompt.md"),
        ("elsewhere/team/x.prompt.md", ID, f"processed/x.{ID}.prompt.md"),
        ("x.prompt.md", ID, f"processed/x.{ID}.prompt.md"),
        ("", ID, f"processed/.{ID}.prompt.md"),
        # not plain: parsed to the normal form first
        ("inbox//team/./x.prompt.md/", ID, f"processed/team/x.{ID}.prompt.md"),
        ("./inbox/team/x.prompt.md", ID, f"processed/team/x.{ID}.prompt.md"),
        ("/inbox/team/x.prompt.md", ID, f"processed/x.{ID}.prompt.md"),
        ("//", ID, f"processed/.{ID}.prompt.md"),
        ("inbox/..", ID, f"processed/...{ID}.prompt.md"),
        ("inbox/../a/x.prompt.md", ID, f"processed/../a/x.{ID}.prompt.md"),
        # an id with a slash makes folders, also in the normal form
        ("inbox/t/x.prompt.md", "a/b", "processed/t/x.a/b.prompt.md"),
        ("inbox/t/x.prompt.md", "a//./b", "processed/t/x.a/b.prompt.md"),
        (".prompt.md", "/x", "processed/x.prompt.md"),
        # the stem cut to 120 bytes, never inside a character
        ("inbox/" + "é" * 90 + ".prompt.md", "x", "processed/" + "é" * 60 + ".x.prompt.md"),
        ("inbox/a" + "é" * 90 + ".prompt.md", "x", "processed/a" + "é" * 59 + ".x.prompt.md"),
    ],
)
def test_processed_rel_names(inbox_rel: str, job_id: str, expected: str) -> None:
    assert Layout(Path("/r")).processed_rel(inbox_rel, job_id) == expected
    assert pathlib_processed_rel(Path("/r"), inbox_rel, job_id) == expected


@pytest.mark.parametrize("inbox_rel", ["inbox", "inbox/", "./inbox"])
def test_processed_rel_of_the_inbox_itself(inbox_rel: str) -> None:
    with pytest.raises(ValueError):
        Layout(Path("/r")).processed_rel(inbox_rel, ID)
    with pytest.raises(ValueError):
        pathlib_processed_rel(Path("/r"), inbox_rel, ID)


@settings(max_examples=400, deadline=None)
@given(rels.filter(bool))
def test_candidates_as_parsed(rel: str) -> None:
    assert list(islice(_candidates(rel), 30)) == list(islice(_candidates_parsed(rel), 30))
