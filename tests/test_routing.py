"""core/routing.py: inbox sub-paths to route defaults. Pure."""

from __future__ import annotations

from hopper.core.routing import fill, literal_prefix, match_route, subpath


def test_subpath() -> None:
    assert subpath("inbox/acme/app/main/x.prompt.md") == ("acme", "app", "main")
    assert subpath("inbox/x.prompt.md") == ()


def test_longest_then_most_literal_wins() -> None:
    keys = ["acme", "acme/{repo}", "acme/{repo}/{branch}", "acme/app/{branch}"]
    m = match_route(keys, ("acme", "app", "main", "deeper"))
    assert m is not None and m.key == "acme/app/{branch}" and m.values == {"branch": "main"}
    m = match_route(keys, ("acme", "web"))
    assert m is not None and m.key == "acme/{repo}" and m.values == {"repo": "web"}
    assert match_route(keys, ("other",)) is None
    assert match_route(keys, ()) is None


def test_fill_and_prefix() -> None:
    assert fill("~/src/{owner}/{repo}", {"owner": "acme", "repo": "app"}) == "~/src/acme/app"
    assert fill("{unknown}", {}) == "{unknown}"
    assert literal_prefix("acme/{repo}/x") == ("acme",)
    assert literal_prefix("night") == ("night",)
