"""The inbox's inotify watch, read in the caller's thread (store/inbox_watch.py).

Real folders, real inotify: the kernel queues an event before the call that
caused it returns, so each ``read()`` here sees what was done before it.
The watch must keep what watchdog's observer thread gave: prompts renamed in
are complete, written in place pending; folders made, moved in, moved out,
renamed, replaced or too deep; links not followed; an overflow or a lost
inbox asks for a full rescan.
"""

from __future__ import annotations

import logging
import os
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from watchdog.observers.inotify_c import InotifyConstants

from hopper.store.inbox import MAX_DEPTH
from hopper.store.inbox_watch import Hints, InboxWatch
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout
from inprocess import in_process, submit, watch_inbox

TEXT = '+++\nagent = "bash"\n+++\ntrue\n'


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "inbox"
    path.mkdir()
    return path


@pytest.fixture
def watch(inbox: Path) -> InboxWatch:
    w = InboxWatch(inbox)
    assert w.start()
    yield w  # type: ignore[misc]
    w.close()


def renamed_in(folder: Path, name: str) -> Path:
    tmp = folder / f".{name}.tmp"
    tmp.write_text(TEXT)
    path = folder / f"{name}.prompt.md"
    os.rename(tmp, path)
    return path


def readable(w: InboxWatch) -> bool:
    return bool(select.select([w], [], [], 0)[0])


def test_a_rename_in_is_complete_a_write_in_place_pending(
    watch: InboxWatch, inbox: Path, tmp_path: Path
) -> None:
    assert not readable(watch)
    inside = renamed_in(inbox, "inside")
    assert readable(watch), "the loop's select wakes on the descriptor itself"
    outside = tmp_path / "outside.tmp"
    outside.write_text(TEXT)
    os.rename(outside, inbox / "outside.prompt.md")
    (inbox / "written.prompt.md").write_text(TEXT)
    (inbox / "notes.txt").write_text("not a prompt")
    hints = watch.read()
    assert hints.complete == {inside, inbox / "outside.prompt.md"}
    assert hints.pending == {inbox / "written.prompt.md"}
    assert not hints.rescan
    assert not readable(watch), "a read drains the descriptor"
    os.rename(inside, tmp_path / "claimed")  # moved out (a claim): nothing to say
    assert watch.read() == Hints()


def test_a_folder_made_later_is_watched_with_what_mkdir_p_made_in_it(
    watch: InboxWatch, inbox: Path
) -> None:
    (inbox / "team").mkdir()
    assert watch.read() == Hints()
    assert inbox / "team" in watch.watched()
    in_team = renamed_in(inbox / "team", "a")
    assert watch.read().complete == {in_team}
    # Made and filled before its watch could be added: its files are pending hints.
    deep = inbox / "x" / "y" / "z"
    deep.mkdir(parents=True)
    (deep / "early.prompt.md").write_text(TEXT)
    assert watch.read().pending == {deep / "early.prompt.md"}
    assert deep in watch.watched()
    late = renamed_in(deep, "late")
    assert watch.read().complete == {late}


def test_a_folder_moved_in_out_or_within_asks_for_a_rescan_and_the_watches_follow(
    watch: InboxWatch, inbox: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside" / "sub"
    outside.mkdir(parents=True)
    os.rename(tmp_path / "outside", inbox / "came")
    hints = watch.read()
    assert hints.rescan, "its prompts came without events: the rescan finds them"
    assert {inbox / "came", inbox / "came" / "sub"} <= set(watch.watched())
    os.rename(inbox / "came", inbox / "moved")  # within the inbox
    assert watch.read().rescan
    assert inbox / "came" not in watch.watched()
    assert inbox / "moved" / "sub" in watch.watched()
    path = renamed_in(inbox / "moved" / "sub", "p")
    assert watch.read().complete == {path}, "reported under its new name"
    os.rename(inbox / "moved", tmp_path / "gone")  # out of the inbox
    assert watch.read().rescan
    assert watch.watched() == [inbox]
    renamed_in(tmp_path / "gone" / "sub", "q")
    assert watch.read() == Hints(), "a folder moved out is not watched any more"


def test_a_replaced_folder_and_a_replaced_inbox_are_watched_again(
    watch: InboxWatch, inbox: Path, tmp_path: Path
) -> None:
    (inbox / "team").mkdir()
    watch.read()
    (inbox / "team").rmdir()
    (inbox / "team").mkdir()
    watch.read()
    path = renamed_in(inbox / "team", "a")
    assert watch.read().complete == {path}
    os.rename(inbox, tmp_path / "old-inbox")
    inbox.mkdir()
    (inbox / "team").mkdir()
    assert watch.read().rescan, "the inbox went: the rescan is the truth"
    assert watch.read().rescan, "watched again: what came meanwhile is for the rescan"
    assert set(watch.watched()) == {inbox, inbox / "team"}
    path = renamed_in(inbox / "team", "b")
    assert watch.read().complete == {path}
    renamed_in(tmp_path / "old-inbox", "c")
    assert watch.read() == Hints(), "the old inbox is not watched"


def test_an_overflow_asks_for_a_rescan_and_rebuilds_the_watches(
    watch: InboxWatch, inbox: Path
) -> None:
    (inbox / "a").mkdir()
    watch.read()
    os.rename(inbox / "a", inbox / "b")
    (inbox / "c").mkdir()  # both events "lost": the overflow comes instead
    hints = Hints()
    overflow = struct.pack("iIII", -1, InotifyConstants.IN_Q_OVERFLOW, 0, 0)
    watch.parse(overflow, hints, {})
    assert hints.rescan
    assert set(watch.watched()) == {inbox, inbox / "b", inbox / "c"}
    path = renamed_in(inbox / "c", "p")
    assert path in watch.read().complete


def test_links_dot_folders_and_folders_too_deep_are_not_watched(
    watch: InboxWatch, inbox: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (inbox / "linked").symlink_to(target)
    (inbox / ".drafts").mkdir()
    top = inbox
    for i in range(MAX_DEPTH + 2):
        top = top / f"d{i}"
    top.mkdir(parents=True)
    watch.read()
    renamed_in(target, "via-link")
    renamed_in(inbox / ".drafts", "draft")
    renamed_in(top, "deep")
    assert watch.read() == Hints()
    watched = watch.watched()
    assert inbox / "linked" not in watched and inbox / ".drafts" not in watched
    assert max(len(p.relative_to(inbox).parts) for p in watched) == MAX_DEPTH
    os.rename(inbox / ".drafts", inbox / "drafts")  # out of hiding: watched
    assert watch.read().rescan
    path = renamed_in(inbox / "drafts", "now")
    assert watch.read().complete == {path}


def test_an_inbox_that_is_a_link_is_not_watched_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "inbox").symlink_to(tmp_path / "real")
    w = InboxWatch(tmp_path / "inbox")
    with caplog.at_level(logging.ERROR):
        assert not w.start()
    assert not w.live and w.read() == Hints()
    assert f"inbox {tmp_path / 'inbox'}: cannot watch with inotify" in caplog.text
    assert "periodic rescan only" in caplog.text


def test_a_failed_read_stops_trusting_inotify_and_asks_for_a_rescan(
    watch: InboxWatch, inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.close(watch.fileno())  # the descriptor broken under it
    with caplog.at_level(logging.ERROR):
        hints = watch.read()
    assert hints.rescan and not watch.live and watch.fileno() == -1
    assert f"inbox {inbox}: reading inotify failed" in caplog.text


def test_no_inotify_instance_left_means_rescans_only(tmp_path: Path) -> None:
    """Every descriptor used up (EMFILE): the watch says why and the watcher goes on."""
    code = f"""
import logging, os, resource, sys
from pathlib import Path
from hopper.store.inbox_watch import InboxWatch
logging.basicConfig(level=logging.ERROR)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print(InboxWatch(Path({str(tmp_path)!r})).start())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
    assert "cannot watch with inotify (Too many open files)" in out.stderr


# -- the loop: its own claims wake no turn; a hint read before the sleep is no sleep --------


def test_the_loop_reads_its_claims_events_before_sleeping_and_never_sleeps_on_a_hint(
    layout: Layout,
) -> None:
    watcher, _fake, clock = in_process(layout, max_parallel=1)
    watch = watch_inbox(watcher)
    watcher.turn()  # the start-up scan: an empty inbox
    submit(layout, clock, "a", TEXT)
    assert readable(watch)
    watcher.turn()  # claimed: renamed out of the inbox, an IN_MOVED_FROM left behind
    assert readable(watch), "the claim's own event is queued"
    watcher.events.pull()  # what the loop does before it sleeps
    assert not readable(watch) and not watcher.events.fresh
    assert watcher._sleep_for() > 0, "no hint: the loop sleeps, woken by no event of its own"
    submit(layout, clock, "b", TEXT)  # renamed in between the turn and the sleep
    watcher.events.pull()
    assert not readable(watch), "the select will not wake for it: the hint is read already"
    assert watcher._sleep_for() == 0.0, "so the loop does not sleep"
    watcher.flags.stop = True  # stopping or degraded claims nothing: hints must not spin
    assert watcher._sleep_for() > 0
    watcher.flags.stop = False
    watcher.degraded = "the root takes no writes"
    assert watcher._sleep_for() > 0
    watcher.degraded = None
    watcher.turn()
    assert not watcher.events.fresh
    names = {read_record(d).name for d in iter_run_dirs(layout.runs)}
    assert names == {"a", "b"}
