"""The owner string host:pid:start: one builder, one parser (core/owner.py)."""

from __future__ import annotations

import pytest

from hopper.core.owner import Owner, parse_owner


def test_an_owner_round_trips_through_its_text() -> None:
    owner = Owner("node-1", 4242, 1763891234.56)
    assert owner.text() == "node-1:4242:1763891234.56"
    assert parse_owner(owner.text()) == owner


def test_a_host_with_colons_keeps_them() -> None:
    assert parse_owner("fe80::1:7:12.5") == Owner("fe80::1", 7, 12.5)


@pytest.mark.parametrize("text", [None, "", "node-1", "node-1:7", "node-1:x:1.0", "node:7:soon"])
def test_a_malformed_owner_is_none(text: str | None) -> None:
    assert parse_owner(text) is None
