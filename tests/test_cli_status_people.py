"""``hopper status`` for people (issue 29): fitted to the terminal, coloured, a footer
with counts, watcher health and PAUSE, unclaimed prompts named, --limit, --since DATE.

Every test runs the command (a subprocess; on a real pseudo-terminal where a
terminal is the point) on a root of real job records.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
import unicodedata
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from conftest import drop
from hopper.core.states import JobState
from hopper.store.layout import Layout
from hopper.store.watchers import write_beat
from test_cli_status import NOW, make

Run = Callable[..., subprocess.CompletedProcess[str]]
ESC = "\x1b["


def plain_env(**extra: str) -> dict[str, str]:
    """The environment without the variables under test, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "LINES")}
    env["TERM"] = "xterm"
    return {**env, **extra}


def status(layout: Layout, config_file: Path, *args: str, **env: str) -> tuple[int, str, str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hopper",
            "status",
            *args,
            "--root",
            str(layout.root),
            "--config",
            str(config_file),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=plain_env(**env),
    )
    return out.returncode, out.stdout, out.stderr


def on_tty(layout: Layout, config_file: Path, cols: int, *args: str, **env: str) -> str:
    """``hopper status`` with stdout on a pseudo-terminal ``cols`` wide; what it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hopper",
            "status",
            *args,
            "--root",
            str(layout.root),
            "--config",
            str(config_file),
        ],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=plain_env(**env),
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        os.close(master)
        if proc.stderr:
            proc.stderr.close()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def cells(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def mixed_root(layout: Layout) -> None:
    make(layout, "nightly-build-of-everything-in-the-monorepo", group="nightly")
    make(layout, "broken", JobState.FAILED, agent="claude", age=timedelta(minutes=30))
    make(layout, "stopped", JobState.ABORTED, age=timedelta(minutes=20))
    make(layout, "busy", JobState.RUNNING, agent="claude", age=timedelta(minutes=10))
    make(layout, "waits", JobState.QUEUED, age=timedelta(minutes=5))


def table_part(out: str) -> list[str]:
    lines = out.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if "jobs" in line and ":" in line)]


def test_columns_fits_the_table_by_priority_and_a_pipe_keeps_the_full_table(
    layout: Layout, config_file: Path
) -> None:
    mixed_root(layout)
    code, full, _ = status(layout, config_file)
    assert code == 0
    header = full.splitlines()[0].split()
    assert header == list(
        ("ID", "NAME", "AGENT", "STATE", "AGENT_STATE", "REASON", "STARTED", "DURATION", "ATTEMPT")
    )
    assert max(len(line) for line in full.splitlines()) > 120  # today's width, for scripts
    assert "…" not in full and "watcher" not in full  # no cuts, no footer: scripts parse it

    _, wide, _ = status(layout, config_file, COLUMNS="250")
    ticking = re.compile(r"\d+h\d+m")  # a running job's DURATION moves with the clock

    def cells_of(line: str) -> list[str]:  # a queued job's REASON says why, for people
        found = re.split(r"\s{2,}", ticking.sub("", line).strip())
        return ["-" if cell.startswith("waits: ") else cell for cell in found]

    assert [cells_of(line) for line in table_part(wide)] == [
        cells_of(line) for line in full.splitlines()
    ]  # room enough: nothing cut or dropped
    assert "waits: its turn, but no watcher serves this root" in wide

    _, fitted, _ = status(layout, config_file, COLUMNS="80")
    rows = table_part(fitted)
    assert max(cells(line) for line in rows) <= 80
    kept = rows[0].split()
    assert kept[:2] == ["ID", "NAME"] and "STATE" in kept
    assert "ATTEMPT" not in kept and "AGENT_STATE" not in kept  # lowest value dropped first
    assert any("20261122-110000-000…" in line for line in rows)  # the id cut to its time stamp
    states = [line.split()[kept.index("STATE")] for line in rows[1:]]
    assert states == ["succeeded", "failed", "aborted", "running", "queued"]

    _, narrow, _ = status(layout, config_file, COLUMNS="40")
    rows = table_part(narrow)
    assert max(cells(line) for line in rows) <= 40
    assert rows[0].split() == ["ID", "NAME", "STATE"]
    assert "nightly-build-of-everything-in-the-monorepo" not in narrow
    assert any("…" in line.split()[1] for line in rows[1:])  # the long name cut, marked


def test_a_terminal_gets_its_width_colours_and_footer_and_no_color_is_honoured(
    layout: Layout, config_file: Path
) -> None:
    mixed_root(layout)
    out = on_tty(layout, config_file, 70)
    rows = table_part(out)
    visible = [line.replace(ESC + "0m", "") for line in rows]
    for code in ("32m", "31m", "33m", "36m", "2m"):
        visible = [line.replace(ESC + code, "") for line in visible]
    assert max(cells(line) for line in visible) <= 70  # the terminal's width, no COLUMNS
    for state, code in (
        ("succeeded", "32m"),
        ("failed", "31m"),
        ("aborted", "33m"),
        ("running", "36m"),
        ("queued", "2m"),
    ):
        assert f"{ESC}{code}{state}{ESC}0m" in out, state
    assert "5 jobs:" in out and "watcher: NONE serves this root" in out

    no_color = on_tty(layout, config_file, 70, NO_COLOR="1")
    assert ESC not in no_color and "5 jobs:" in no_color
    forced = on_tty(layout, config_file, 70, "--color=always", NO_COLOR="1")
    assert f"{ESC}31mfailed" in forced  # the command line beats NO_COLOR (no-color.org)
    assert ESC not in on_tty(layout, config_file, 70, "--color=never")


def test_color_flag_on_a_pipe(layout: Layout, config_file: Path) -> None:
    mixed_root(layout)
    assert ESC not in status(layout, config_file)[1]  # auto: a pipe gets none
    _, always, _ = status(layout, config_file, "--color=always")
    assert f"{ESC}31mfailed{ESC}0m" in always and f"{ESC}32msucceeded{ESC}0m" in always
    stripped = always.replace(f"{ESC}0m", "")
    for code in ("32m", "31m", "33m", "36m", "2m"):
        stripped = stripped.replace(ESC + code, "")
    # colour changes no alignment (a running job's DURATION moves with the clock: a
    # minute may turn between the two calls)
    ticking = re.compile(r"\d+h\d+m")
    assert ticking.sub("", stripped) == ticking.sub("", status(layout, config_file)[1])
    bad = status(layout, config_file, "--color=sometimes")
    assert bad[0] == 2 and "--color" in bad[2]


def test_footer_counts_watcher_health_and_pause(layout: Layout, config_file: Path) -> None:
    mixed_root(layout)
    _, out, _ = status(layout, config_file, COLUMNS="100")
    footer = out.splitlines()[len(table_part(out)) :]
    assert footer[0] == "5 jobs: 1 running, 1 queued, 1 failed, 1 aborted, 1 succeeded"
    assert footer[1].startswith("watcher: NONE serves this root (no heartbeat file)")
    assert not any("PAUSED" in line for line in footer)

    (layout.root / "PAUSE").touch()
    (layout.inbox / "nightly").mkdir()
    (layout.inbox / "nightly" / "PAUSE").touch()
    beat = write_beat(
        layout, host="h1", pid=4242, owner="h1:4242:1.0", started=1.0, running=1, queued=1
    )
    _, out, _ = status(layout, config_file, COLUMNS="100")
    assert re.search(r"^watcher: serving this root \(h1 pid 4242 beat \d+s ago\)$", out, re.M)
    assert f"PAUSED: the whole queue ({layout.root / 'PAUSE'})" in out
    assert "PAUSED groups: nightly" in out

    old = time.time() - 3600  # its watcher stopped beating an hour ago
    os.utime(beat, (old, old))
    _, out, _ = status(layout, config_file, COLUMNS="100")
    assert "watcher: NONE serves this root (no heartbeat file is fresh; 1 dead)" in out

    _, some, _ = status(
        layout, config_file, "--state", "failed", "--state", "queued", COLUMNS="100"
    )
    assert "2 jobs match: 1 queued, 1 failed" in some


def test_unclaimed_prompts_are_named_not_no_jobs(layout: Layout, config_file: Path) -> None:
    code, out, _ = status(layout, config_file)
    assert (code, out) == (0, f"no jobs under {layout.runs}\n")
    drop(layout, "first", "echo 1\n")
    drop(layout, "second", "echo 2\n", sub="team")
    code, out, _ = status(layout, config_file)
    assert code == 0 and "no jobs" not in out
    assert out == f"2 prompts wait unclaimed in {layout.inbox}: first, team/second\n"

    for n in range(5):
        drop(layout, f"more-{n}", "echo\n")
    drop(layout, "evil\x1b]0;owned\x07", "echo\n")
    make(layout, "done")
    _, out, _ = status(layout, config_file, COLUMNS="120")
    line = next(line for line in out.splitlines() if "unclaimed" in line)
    assert line.startswith(f"8 prompts wait unclaimed in {layout.inbox}: ")
    assert line.endswith("(and 3 more)") and line.count(",") == 4
    assert "evil\\x1b]0;owned\\x07" in line  # named, its escape shown escaped
    assert "\x1b" not in out


def test_limit_and_since_a_date(layout: Layout, config_file: Path) -> None:
    mixed_root(layout)
    code, out, _ = status(layout, config_file, "--json", "--limit", "2")
    assert code == 0
    assert [r["name"] for r in json.loads(out)] == ["busy", "waits"]  # the newest two
    _, table, _ = status(layout, config_file, "--limit", "2", COLUMNS="150")
    assert "showing the newest 2 of 5 jobs" in table and "broken" not in table
    for bad in ("0", "-3", "many"):
        code, _, err = status(layout, config_file, "--limit", bad)
        assert code == 2 and "--limit" in err and bad in err

    make(layout, "ancient", age=timedelta(days=400))
    recent = (NOW - timedelta(days=2)).strftime("%Y-%m-%d")
    code, out, _ = status(layout, config_file, "--json", "--since", recent)
    assert code == 0, out
    names = {r["name"] for r in json.loads(out)}
    assert "ancient" not in names and "broken" in names
    code, out, _ = status(layout, config_file, "--json", "--since", f"{recent}T08:00")
    assert code == 0 and {r["name"] for r in json.loads(out)} == names
    code, _, err = status(layout, config_file, "--since", "last tuesday")
    assert code == 2 and "nor a date" in err


def test_json_is_unchanged_by_terminal_settings(layout: Layout, config_file: Path) -> None:
    mixed_root(layout)
    drop(layout, "pending", "echo\n")
    (layout.root / "PAUSE").touch()
    _, plain, _ = status(layout, config_file, "--json")
    _, dressed, _ = status(layout, config_file, "--json", "--color=always", COLUMNS="40")
    assert plain == dressed
    assert [r["name"] for r in json.loads(plain)] == [
        "nightly-build-of-everything-in-the-monorepo",
        "broken",
        "stopped",
        "busy",
        "waits",
    ]


def test_a_queued_job_says_what_it_waits_for_in_the_dashboards_words(
    layout: Layout, tmp_path: Path
) -> None:
    """core/waits.py words it once: hopper status (for people) and /api/page agree."""
    from hopper.core import waits

    config_file = tmp_path / "one-slot.toml"
    config_file.write_text("max_parallel = 1\n")
    make(layout, "busy", JobState.RUNNING)
    make(layout, "next-one", JobState.QUEUED, age=timedelta(minutes=5))
    _, out, _ = status(layout, config_file, COLUMNS="200")
    assert re.search(r"next-one .*waits: all slots busy", out), out
    _, piped, _ = status(layout, config_file)  # for scripts: the table as it always was
    assert "waits:" not in piped
    shutil.rmtree(layout.run_dir(make(layout, "busy", JobState.RUNNING).id))
    _, out, _ = status(layout, config_file, COLUMNS="200")
    assert f"waits: {waits.NO_WATCHER}" in out


def test_a_message_waiting_for_its_sessions_turn_is_said_once(
    layout: Layout, config_file: Path
) -> None:
    """For people REASON says why a queued message waits and ACTIVITY does not repeat it;
    a pipe (no scheduler asked) keeps it in ACTIVITY."""
    for name, state, age in (("first", JobState.RUNNING, 9), ("second", JobState.QUEUED, 5)):
        rec = make(layout, name, state, age=timedelta(minutes=age))
        text = rec.model_copy(update={"session": "chat"}).model_dump_json()
        (layout.run_dir(rec.id) / "job.json").write_text(text)
    wait = "waiting for session chat's turn"
    _, out, _ = status(layout, config_file, COLUMNS="250")
    row = next(line for line in out.splitlines() if "second" in line)
    assert row.count(wait) == 1 and f"waits: {wait}" in row, out
    _, piped, _ = status(layout, config_file)
    row = next(line for line in piped.splitlines() if "second" in line)
    assert row.count(wait) == 1 and "waits:" not in row, piped
