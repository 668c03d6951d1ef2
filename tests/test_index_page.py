"""A page of the status index (the dashboard's list): SQL that selects what the Python
filter does, newest first, a cursor that walks every job once, counts that match the list."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hopper.core.selection import JobFilter
from hopper.core.states import JobState
from hopper.store.index import JobIndex
from hopper.store.index_page import PAGE_MAX, page
from hopper.store.layout import Layout
from test_index_trust import NOW, make

FILTERS: list[Callable[[float], JobFilter]] = [
    lambda now: JobFilter(),
    lambda now: JobFilter(states=frozenset({JobState.FAILED})),
    lambda now: JobFilter(states=frozenset({JobState.FAILED, JobState.RUNNING})),
    lambda now: JobFilter(agents=frozenset({"claude"}), groups=frozenset({"team"})),
    lambda now: JobFilter(since=now - 5 * 3600),
    lambda now: JobFilter(names=("JOB1*",)),
    lambda now: JobFilter(names=("job2", "*-job3-*"), agents=frozenset({"bash"})),
    lambda now: JobFilter(reasons=frozenset({"exit_nonzero"})),
    lambda now: JobFilter(text="B1"),  # a piece of the name, any letter case
    lambda now: JobFilter(text="-job2", states=frozenset({JobState.SUCCEEDED})),
    lambda now: JobFilter(text="no such job"),
]


@pytest.fixture
def mixed(layout: Layout) -> Layout:
    agents, groups = ("bash", "claude", "codex"), ("", "team", "nightly")
    states = (JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING, JobState.QUEUED)
    for i in range(30):
        make(layout, i, states[i % 4], agent=agents[i % 3], group=groups[i % 5 % 3])
    return layout


@pytest.mark.parametrize("make_filter", FILTERS, ids=range(len(FILTERS)))
def test_pages_walk_what_the_python_filter_selects_newest_first(
    mixed: Layout, make_filter: Callable[[float], JobFilter]
) -> None:
    wanted = make_filter(NOW.timestamp())
    with JobIndex.open(mixed) as index:
        index.refresh()
        everything = index.jobs()
        expected = [j for j in reversed(everything) if wanted.matches(j)]
        walked, before, pages = [], None, 0
        while True:
            got = page(index, wanted, before=before, size=4)
            walked += got.jobs
            pages += 1
            assert got.total == len(expected)
            if got.next is None:
                break
            before = got.next
        assert walked == expected
        assert pages == max(1, -(-len(expected) // 4))
        # the counts: every state, over the filters other than state
        others = JobFilter(
            since=wanted.since,
            agents=wanted.agents,
            groups=wanted.groups,
            names=wanted.names,
            reasons=wanted.reasons,
            text=wanted.text,
        )
        for state in JobState:
            n = sum(1 for j in everything if others.matches(j) and j.state is state)
            assert got.counts[state.value] == n


def test_a_badge_count_is_the_length_of_the_list_it_selects(mixed: Layout) -> None:
    with JobIndex.open(mixed) as index:
        index.refresh()
        counts = page(index, JobFilter(), size=1).counts
        for state in JobState:
            listed = page(index, JobFilter(states=frozenset({state})), size=PAGE_MAX)
            assert len(listed.jobs) == listed.total == counts[state.value]


def test_a_page_is_never_larger_than_the_cap(
    mixed: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hopper.store.index_page as index_page

    monkeypatch.setattr(index_page, "PAGE_MAX", 7)
    with JobIndex.open(mixed) as index:
        index.refresh()
        capped = page(index, JobFilter(), size=10**9)
        assert len(capped.jobs) == 7 and capped.total == 30 and capped.next == capped.jobs[-1].id
        assert page(index, JobFilter(), size=-5).jobs == []
