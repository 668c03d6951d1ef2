"""Names chosen by whoever drops a prompt never drive the operator's terminal.

Black-box: prompts named with an OSC title write (``ESC ] 0 ; … BEL``), an OSC 52
clipboard write, ``ESC [ 8 m`` (concealed text), a newline that would forge a row
of ``hopper status``, and a right-to-left override, run through a real watcher;
then every command that prints a name or a path is run and its stdout and stderr
are searched for a raw control character. Each name must still be recognisable,
escaped as Python writes it (``\\x1b``, ``\\n``, ``\\u202e``). ``--json`` stays
exact JSON: the name comes back byte for byte.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import bash, drop, hopper_cmd, wait_for
from hopper.core.record import JobRecord
from hopper.core.terminal import terminal_safe
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.store.watchers import write_beat

TITLE = "title\x1b]0;pwned\x07"  # retitles the terminal
CLIP = "clip\x1b]52;c;cm0gLXJmIH4K\x07"  # writes the clipboard
HIDE = "hide\x1b[8m"  # conceals what follows
FORGE = "forge\nffffffffffff  root  bash  succeeded"  # a status row of its own
BIDI = "bidi\u202etxt.exe"  # shown reversed
NAMES = (TITLE, CLIP, HIDE, FORGE, BIDI)
GROUP = "team\x1b]0;grp\x07"  # an inbox sub-folder: usage --by group, pause

Run = Callable[..., subprocess.CompletedProcess[str]]


def raw_controls(text: str) -> list[str]:
    """Control characters a terminal would act on (a newline ends a line: allowed)."""
    return [c for c in text if c != "\n" and terminal_safe(c) != c]


def clean(result: subprocess.CompletedProcess[str]) -> str:
    """stdout + stderr, asserted free of raw control characters."""
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        bad = raw_controls(text)
        assert not bad, f"{result.args[3:5]} {stream} has raw controls {bad!r}: {text!r}"
    return result.stdout + result.stderr


def job_named(layout: Layout, name: str) -> JobRecord:
    [rec] = [r for d in iter_run_dirs(layout.runs) if (r := read_record(d)).name == name]
    return rec


@pytest.fixture
def ran(layout: Layout, hopper: Run) -> dict[str, JobRecord]:
    """Every hostile name run to its end by `hopper run --until-idle`; HIDE never ran."""
    for name in NAMES:
        script = bash("echo hi") if name != HIDE else '+++\nagent = "nosuch"\n+++\nhi\n'
        drop(layout, name, script)
    drop(layout, "grouped", bash("echo grouped"), sub=GROUP)
    done = hopper("run", "--until-idle", timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: job_named(layout, name) for name in NAMES}


def test_status_and_events_escape_every_control_character(
    ran: dict[str, JobRecord], hopper: Run
) -> None:
    table = clean(hopper("status"))
    for name in NAMES:
        assert terminal_safe(name) in table, f"{name!r} recognisable in status"
    assert "title\\x1b]0;pwned\\x07" in table and "forge\\nffffffffffff  root" in table
    assert not any(line.startswith("ffffffffffff") for line in table.splitlines()), "no forged row"
    for name, rec in ran.items():
        one = clean(hopper("status", rec.id))
        assert terminal_safe(name) in one
        events = clean(hopper("events", rec.id))
        assert terminal_safe(name) in events, f"events of {name!r} show its inbox path"
        as_json = hopper("events", rec.id, "--json").stdout.splitlines()
        assert len(events.splitlines()) == len(as_json), "one line per event"
        # --json stays exact JSON: the name comes back as it was.
        assert any(json.loads(line).get("inbox_path") == rec.inbox_path for line in as_json)
    listed = json.loads(hopper("status", "--json").stdout)
    assert {r["name"] for r in listed} >= set(NAMES)


def test_logs_usage_wait_retry_submit_pause_escape_names(
    ran: dict[str, JobRecord], hopper: Run, layout: Layout, tmp_path: Path
) -> None:
    never = hopper("logs", ran[HIDE].id)  # never ran: says so, naming the job
    assert never.returncode == 1
    assert "hide\\x1b[8m" in clean(never)
    assert "team\\x1b]0;grp\\x07" in clean(hopper("usage", "--by", "group"))
    waited = clean(hopper("wait", *(r.id for r in ran.values())))
    assert ran[TITLE].id in waited
    retried = clean(hopper("retry", ran[TITLE].id))
    assert "title\\x1b]0;pwned\\x07" in retried
    # The retried prompt waits in the inbox: status names it as not claimed yet.
    assert "not claimed yet" in clean(hopper("status", "title\x1b]0;pwned\x07"))
    src = tmp_path / f"{CLIP}.prompt.md"
    src.write_text(bash("echo again"))
    assert "clip\\x1b]52;c;" in clean(hopper("submit", str(src)))
    assert "team\\x1b]0;grp\\x07" in clean(hopper("pause", GROUP))
    assert "team\\x1b]0;grp\\x07" in clean(hopper("resume", GROUP))


def test_watchers_and_doctor_escape_what_they_read(
    layout: Layout, hopper: Run, tmp_path: Path
) -> None:
    # A job can write the heartbeat folder: a planted beat with a hostile host name.
    write_beat(layout, host=TITLE, pid=1, owner="x", started=0.0, running=0, queued=0)
    assert "title\\x1b]0;pwned\\x07" in clean(hopper("watchers"))
    root = tmp_path / f"root{HIDE}"
    doctor = subprocess.run(
        hopper_cmd("doctor", "--root", str(root)), capture_output=True, text=True, timeout=60
    )
    assert "roothide\\x1b[8m" in clean(doctor)


def test_a_watcher_log_line_is_one_line(layout: Layout, config_file: Path) -> None:
    """`hopper run` logs the names it claims: escaped, one record per line."""
    drop(layout, FORGE, bash("echo hi"))
    done = subprocess.run(
        hopper_cmd("run", "--until-idle", "--root", str(layout.root), "--config", str(config_file)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert "forge\\nffffffffffff" in clean(done)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_watch_shows_a_running_name_escaped(
    layout: Layout, watchers, config_file: Path, tmp_path: Path
) -> None:
    from test_watch_tmux import Tmux, start_watch

    go = tmp_path / "go"
    drop(layout, FORGE, bash(f"while [ ! -e {go} ]; do sleep 0.05; done"))
    watchers.start()
    tmux = Tmux()
    try:
        start_watch(tmux, layout, config_file)
        wait_for(lambda: "running 1/1" in tmux.screen(), what="the running job in watch")
        screen = tmux.screen()
        assert "[forge\\nffffffffffff  root  bash  succeeded]" in screen, screen
        assert not any(line.startswith("ffffffffffff") for line in screen.splitlines())
        tmux("send-keys", "-t", "w", "q")
    finally:
        go.touch()
        tmux.kill()
