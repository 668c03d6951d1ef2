"""The watcher's log lines carry syslog priorities when stderr is the journal.

journald reads ``<N>`` at the start of a line as its priority (the units keep
``SyslogLevelPrefix=yes``, the default); systemd says stderr is the journal by
``JOURNAL_STREAM=<device>:<inode>``. Only a match with stderr itself counts:
the variable is inherited, and a terminal or a file gets plain lines.
"""

from __future__ import annotations

import logging
import os
import pty
import subprocess
import sys
from pathlib import Path

from conftest import drop, hopper_cmd
from hopper.cli.logsetup import LineFormatter, priority, stderr_is_journal
from hopper.store.layout import Layout

REPO = Path(__file__).resolve().parent.parent
BAD = '+++\nagent = "bsh"\n+++\necho hi\n'  # the watcher warns: unknown agent


def record(level: int, message: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("hopper.x", level, __file__, 1, message, None, info)


def test_each_level_has_its_syslog_priority() -> None:
    levels = (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)
    assert [priority(level) for level in levels] == [2, 3, 4, 6, 7]
    assert priority(logging.INFO + 5) == 6  # between two levels: the lower's
    assert priority(1) == 7


def test_the_journal_formatter_prefixes_every_line_of_a_record() -> None:
    journal = LineFormatter("%(levelname)s %(name)s: %(message)s", journal=True)
    assert journal.format(record(logging.WARNING, "late")) == "<4>WARNING hopper.x: late"
    assert journal.format(record(logging.INFO, "a\nb")) == "<6>INFO hopper.x: a\\nb"  # one line
    lines = journal.format(record(logging.ERROR, "failed", exc=True)).split("\n")
    assert len(lines) > 2 and all(line.startswith("<3>") for line in lines), lines
    assert lines[-1] == "<3>ValueError: boom"
    plain = LineFormatter("%(levelname)s %(message)s")
    assert plain.format(record(logging.DEBUG, "x")) == "DEBUG x"


def test_journal_stream_counts_only_when_it_names_stderr_itself(tmp_path: Path) -> None:
    path = tmp_path / "err"
    with open(path, "w") as err, open(tmp_path / "other", "w") as other:
        st = os.fstat(err.fileno())
        here = f"{st.st_dev}:{st.st_ino}"
        assert stderr_is_journal({"JOURNAL_STREAM": here}, err.fileno())
        assert not stderr_is_journal({"JOURNAL_STREAM": here}, other.fileno())
        assert not stderr_is_journal({}, err.fileno())
        for junk in ("", "8", "8:", ":5", "a:b", f"{st.st_dev}:{st.st_ino}x"):
            assert not stderr_is_journal({"JOURNAL_STREAM": junk}, err.fileno()), junk
    assert not stderr_is_journal({"JOURNAL_STREAM": here}, 987654)  # a closed fd


def run_watcher(layout: Layout, config: Path, stderr: int, journal: str) -> None:
    env = {**os.environ, "JOURNAL_STREAM": journal, "PYTHONPATH": str(REPO / "src")}
    subprocess.run(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config), "--until-idle"),
        stderr=stderr,
        stdout=subprocess.DEVNULL,
        env=env,
        timeout=120,
        check=True,
    )


def test_a_watcher_under_journald_writes_priorities(
    layout: Layout, config_file: Path, tmp_path: Path
) -> None:
    drop(layout, "bad", BAD)
    path = tmp_path / "stderr"
    with open(path, "wb") as err:
        st = os.fstat(err.fileno())
        run_watcher(layout, config_file, err.fileno(), f"{st.st_dev}:{st.st_ino}")
    lines = path.read_text().splitlines()
    assert any(line.startswith("<6>INFO hopper.watcher: watching ") for line in lines), lines
    assert any(
        line.startswith("<4>WARNING hopper.intake: ") and "unknown_agent" in line for line in lines
    ), lines
    assert all(line[:3] in ("<2>", "<3>", "<4>", "<6>", "<7>") for line in lines), lines


def test_a_watcher_on_a_terminal_writes_plain_lines(
    layout: Layout, config_file: Path, tmp_path: Path
) -> None:
    drop(layout, "bad", BAD)
    elsewhere = tmp_path / "journal"  # the variable inherited from a unit: not our stderr
    elsewhere.touch()
    st = os.stat(elsewhere)
    main, child = pty.openpty()
    try:
        run_watcher(layout, config_file, child, f"{st.st_dev}:{st.st_ino}")
        os.close(child)
        child = -1
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
        if child >= 0:
            os.close(child)
    lines = out.decode().splitlines()
    assert any(line.startswith("INFO hopper.watcher: watching ") for line in lines), lines
    assert any(line.startswith("WARNING hopper.intake: ") for line in lines), lines
    assert not any(line.startswith("<") for line in lines), lines


def test_the_units_keep_journald_reading_the_prefixes() -> None:
    units = sorted((REPO / "systemd").glob("*.service"))
    assert any("ExecStart=@HOPPER_BIN@ run" in u.read_text() for u in units)
    for unit in units:
        settings = [
            line.strip() for line in unit.read_text().splitlines() if "SyslogLevelPrefix" in line
        ]
        assert all(
            s.lower() in ("sysloglevelprefix=yes", "sysloglevelprefix=true") or s.startswith("#")
            for s in settings
        ), (unit, settings)
