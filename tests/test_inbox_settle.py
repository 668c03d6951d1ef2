"""A prompt written in steps is claimed once, whole; a renamed-in one at once.

``echo a > x.prompt.md; sleep 0.3; echo b >> x.prompt.md`` used to run as two
jobs: the first close was taken as the end, the prompt claimed (renamed away),
and the append made x.prompt.md anew, a second prompt holding the rest of the
script (``rm -rf $DIR/cache`` with DIR unset). Now a prompt written in place is
claimed only once it has not changed for ``settle`` seconds
(store/inbox_settle.py). The first tests drive the bookkeeping alone, then the
watcher in-process on a fake clock reading the inbox's real inotify watch, then a real
watcher with a real shell writing the prompt.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import FAST_CONFIG, Watchers, bash, drop, wait_for
from hopper.core.states import JobState
from hopper.store.inbox import scan
from hopper.store.inbox_backlog import Backlog
from hopper.store.inbox_settle import Settling
from hopper.store.jobfile import LOG_FILE, PROMPT_FILE, iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, in_process, watch_inbox

P = Path("/inbox/x.prompt.md")
NOW = 1_700_000_000.0  # wall clock of the unit tests
MONO = 500.0


# -- the bookkeeping ---------------------------------------------------------------


def test_a_prompt_closed_now_is_whole_settle_seconds_later_not_before() -> None:
    s = Settling(1.0)
    s.touched([P], MONO)
    assert s.due(MONO + 0.9) == []
    assert s.next_due() == MONO + 1.0
    assert s.due(MONO + 1.0) == [P]
    assert s.look(P, (10, NOW), NOW + 1.0, MONO + 1.0)


def test_every_write_starts_the_settle_time_again() -> None:
    s = Settling(1.0)
    s.touched([P], MONO)
    s.touched([P], MONO + 0.3)  # the append
    assert s.due(MONO + 1.0) == []
    assert not s.look(P, (20, NOW + 0.3), NOW + 1.0, MONO + 1.0)
    assert s.look(P, (20, NOW + 0.3), NOW + 1.3, MONO + 1.3)


def test_a_change_seen_by_a_look_counts_from_that_look_whatever_the_mtime_says() -> None:
    s = Settling(1.0)
    assert not s.look(P, (10, NOW), NOW, MONO)  # just written
    # Grown, yet its mtime claims an hour ago (another host's clock, or touch -d).
    assert not s.look(P, (20, NOW - 3600), NOW + 0.5, MONO + 0.5)
    assert s.due(MONO + 1.4) == []
    assert not s.look(P, (20, NOW - 3600), NOW + 1.4, MONO + 1.4)
    assert s.look(P, (20, NOW - 3600), NOW + 1.5, MONO + 1.5)


def test_a_prompt_found_by_a_rescan_is_as_old_as_its_mtime_says() -> None:
    s = Settling(1.0)
    assert s.look(P, (10, NOW - 60), NOW, MONO), "dropped while the watcher was down"
    s.forget([P])  # claimed
    young = Path("/inbox/y.prompt.md")
    assert not s.look(young, (10, NOW - 0.4), NOW, MONO)
    assert s.due(MONO + 0.5) == []
    assert s.due(MONO + 0.6) == [young]


def test_an_mtime_in_the_future_waits_settle_from_first_sight() -> None:
    s = Settling(1.0)
    assert not s.look(P, (10, NOW + 3600), NOW, MONO)
    assert not s.look(P, (10, NOW + 3600), NOW + 0.9, MONO + 0.9)
    assert s.look(P, (10, NOW + 3600), NOW + 1.0, MONO + 1.0)


def test_a_held_prompt_is_looked_at_again_after_settle() -> None:
    s = Settling(1.0)
    assert s.look(P, (10, NOW - 60), NOW, MONO)
    s.held(P, MONO)  # a process holds it open for writing
    assert s.due(MONO + 0.5) == []
    assert s.due(MONO + 1.0) == [P]


def test_forget_and_keep_only() -> None:
    s = Settling(1.0)
    other = Path("/inbox/y.prompt.md")
    s.touched([P, other], MONO)
    s.keep_only({other})
    assert list(s) == [other]
    s.forget([other])
    assert not s and s.next_due() is None


def test_a_backlog_gives_up_a_path_written_again_before_its_claim() -> None:
    b = Backlog()
    a, c, d = (Path(f"/inbox/{n}.prompt.md") for n in "acd")
    b.add([a])
    b.add([c, d])
    b.add([P])
    b.discard([c, d, Path("/inbox/never.prompt.md")])  # a whole middle group
    assert c not in b and len(b) == 2
    assert list(b.batch(10)) == [a, P]


# -- the watcher, in-process (the inbox's real inotify watch) ---------------------------


def write(path: Path, text: str, clock: FakeClock, mode: str = "w") -> None:
    with open(path, mode) as fh:
        fh.write(text)
    os.utime(path, (clock.time(), clock.time()))


def step(watcher: Watcher, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    watcher.turn()


def job_dirs(layout: Layout) -> list[Path]:
    return list(iter_run_dirs(layout.runs))


def succeeded(layout: Layout) -> list[str]:
    """The names of the jobs that succeeded (a claim still under way is not one)."""
    out = []
    for run_dir in job_dirs(layout):
        try:
            record = read_record(run_dir)
        except FileNotFoundError:
            continue
        if record.state is JobState.SUCCEEDED:
            out.append(record.name)
    return sorted(out)


def test_a_prompt_closed_twice_is_claimed_once_whole_after_settle(layout: Layout) -> None:
    watcher, _, clock = in_process(layout, settle="1s")
    watch_inbox(watcher)
    watcher.turn()  # the start-up scan: an empty inbox
    path = layout.inbox / "x.prompt.md"
    write(path, '+++\nagent = "bash"\n+++\nDIR=/somewhere\n', clock)  # created, closed
    step(watcher, clock, 0.0)
    step(watcher, clock, 0.3)
    assert job_dirs(layout) == [], "the first close is not the end"
    write(path, 'rm -rf "$DIR/cache"\n', clock, mode="a")  # modified, closed again
    step(watcher, clock, 0.0)
    step(watcher, clock, 0.9)  # 1.2 s after the first close, 0.9 s after the last
    assert job_dirs(layout) == []
    step(watcher, clock, 0.2)
    [run_dir] = job_dirs(layout)
    assert (run_dir / PROMPT_FILE).read_text().endswith('DIR=/somewhere\nrm -rf "$DIR/cache"\n')
    assert read_record(run_dir).state in (JobState.QUEUED, JobState.RUNNING)
    assert not path.exists() and not watcher.claims.waiting


def test_a_prompt_renamed_in_from_outside_the_inbox_is_claimed_at_once(
    layout: Layout, tmp_path: Path
) -> None:
    watcher, _, clock = in_process(layout, settle="30s")
    watch_inbox(watcher)
    watcher.turn()
    path = layout.inbox / "moved.prompt.md"
    outside = tmp_path / "moved.tmp"
    write(outside, '+++\nagent = "bash"\n+++\ntrue\n', clock)
    os.rename(outside, path)  # IN_MOVED_TO, no IN_MOVED_FROM to pair
    step(watcher, clock, 0.0)
    assert len(job_dirs(layout)) == 1


def test_a_young_prompt_found_by_a_rescan_waits_out_its_settle_time(layout: Layout) -> None:
    watcher, _, clock = in_process(layout, settle="1s")
    path = layout.inbox / "young.prompt.md"
    write(path, '+++\nagent = "bash"\n+++\ntrue\n', clock)
    os.utime(path, (clock.time() - 0.4, clock.time() - 0.4))  # written 0.4 s ago, no hint
    watcher.turn()  # the start-up scan finds it
    assert job_dirs(layout) == []
    step(watcher, clock, 0.5)
    assert job_dirs(layout) == []
    step(watcher, clock, 0.15)
    assert len(job_dirs(layout)) == 1


# -- a real watcher, a real shell --------------------------------------------------


def serving(watchers: Watchers, log: Path) -> subprocess.Popen[str]:
    """A watcher past its start-up scan, inotify watching (it says so once both are done;
    a prompt the start-up scan finds is judged by its mtime instead)."""
    proc = watchers.start(stderr=log)
    wait_for(lambda: "INFO hopper.watcher: watching" in log.read_text(), what="the watcher up")
    return proc


def use_settle(config_file: Path, settle: str) -> None:
    config_file.write_text(FAST_CONFIG.replace('settle = "0.3s"', f'settle = "{settle}"'))


def test_a_prompt_appended_after_a_pause_runs_once_with_the_whole_script(
    layout: Layout, watchers, config_file: Path, tmp_path: Path
) -> None:
    use_settle(config_file, "2s")
    proc = serving(watchers, tmp_path / "watcher.log")
    target = tmp_path / "data"
    path = layout.inbox / "x.prompt.md"
    # The reproduction: a prompt written in two steps, 0.3 s apart.
    script = (
        f"printf '+++\\nagent = \"bash\"\\n+++\\nDIR={target}\\n' > {path}; sleep 0.3; "
        f"printf 'echo \"cache=$DIR/cache\"\\n' >> {path}"
    )
    subprocess.run(["sh", "-c", script], check=True, timeout=30)
    wait_for(lambda: succeeded(layout), what="the prompt's job to succeed")
    [run_dir] = job_dirs(layout)
    assert (run_dir / LOG_FILE).read_text() == f"cache={target}/cache\n"
    assert list(scan(layout.inbox)) == [], "no second half left to run"
    assert proc.poll() is None


def test_renamed_in_prompts_do_not_wait_for_settle(
    layout: Layout, watchers, config_file: Path, tmp_path: Path
) -> None:
    """The safe way stays fast: a rename from inside or outside the inbox is claimed at
    once, with ``settle`` far longer than the wait."""
    use_settle(config_file, "600s")
    log = tmp_path / "watcher.log"
    serving(watchers, log)
    inside = drop(layout, "inside", bash("true"))  # .inside.tmp in the inbox, renamed
    outside = tmp_path / "outside.tmp"
    outside.write_text(bash("true"))
    os.rename(outside, layout.inbox / "outside.prompt.md")
    try:
        wait_for(  # claimed: renamed out of the inbox into a run directory
            lambda: not inside.exists() and not (layout.inbox / "outside.prompt.md").exists(),
            timeout=90,  # a loaded machine; waiting for settle would take 600 s
            what="both renamed-in prompts to be claimed (well before settle)",
        )
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:]) from None
