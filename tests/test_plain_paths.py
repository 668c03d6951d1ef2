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


@settings(max_examples=400, deadline=None)
@given(rels, ids)
def test_processed_rel_as_the_path(rel: str, job_id: str) -> None:
    layout = Layout(Path("/tmp/root"))
    try:
        expected: str | None = layout.relative(layout.processed_path(rel, job_id))
    except ValueError:
        expected = None
    try:
        got: str | None = layout.processed_rel(rel, job_id)
    except ValueError:
        got = None
    assert got == expected


@settings(max_examples=400, deadline=None)
@given(rels.filter(bool))
def test_candidates_as_parsed(rel: str) -> None:
    assert list(islice(_candidates(rel), 30)) == list(islice(_candidates_parsed(rel), 30))
