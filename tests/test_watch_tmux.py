"""``hopper watch`` for real, in a tmux pane on a private server (-L), read with capture-pane."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.spend import file_spends

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


class Tmux:
    def __init__(self) -> None:
        self.socket = f"hopper-test-{secrets.token_hex(4)}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "w")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
        base = os.environ.get("TMUX_TMPDIR", "/tmp")
        Path(base, f"tmux-{os.getuid()}", self.socket).unlink(missing_ok=True)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    yield t
    t.kill()


def start_watch(tmux: Tmux, layout: Layout, config_file: Path) -> None:
    watch = shlex.join(
        [sys.executable, "-m", "hopper", "watch", "--root", str(layout.root),
         "--config", str(config_file)]
    )  # fmt: skip
    # After the view exits, show its exit status and the tty modes it left behind.
    # The shell traps SIGINT (a caught signal is reset for children) so Ctrl+C ends only watch.
    modes = "stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo"
    cmd = f"trap true INT; {watch}; echo EXIT=$?; {modes}; echo MODES-END; cat"
    tmux("new-session", "-d", "-s", "w", "-x", "120", "-y", "30", "sh", "-c", cmd)


def test_watch_view_switch_abort_copy_quit(
    layout: Layout, watchers, config_file: Path, tmux: Tmux
) -> None:
    for name in ("alpha", "beta"):
        drop(
            layout,
            name,
            bash(f"i=0; while true; do i=$((i+1)); echo {name}-tick-$i; sleep 0.1; done"),
        )
    watchers.start()
    start_watch(tmux, layout, config_file)
    wait_for(lambda: "running 2" in tmux.screen(), what="status bar with two running jobs")
    screen = tmux.screen()
    assert screen.splitlines()[0].lstrip().startswith("hopper")
    assert "watcher alive" in screen
    wait_for(lambda: "alpha-tick" in tmux.screen(), what="alpha's output")
    tmux("send-keys", "-t", "w", "j")
    wait_for(lambda: "[beta]" in tmux.screen() and "beta-tick" in tmux.screen(), what="switch")
    # copy mode: output stops scrolling
    tmux("send-keys", "-t", "w", "c")
    wait_for(lambda: "COPY MODE" in tmux.screen(), what="copy mode")
    frozen = tmux.screen()
    wait_for(
        lambda: (
            (layout.root / "runs").exists()
            and any(
                "beta-tick-" in (d / "job.log").read_text()
                and (d / "job.log").read_text().count("\n") > frozen.count("beta-tick") + 25
                for d in layout.runs.iterdir()
                if (d / "job.log").exists() and "beta" in d.name
            )
        ),
        what="beta to print well past the frozen screen",
    )
    assert [ln for ln in tmux.screen().splitlines() if "beta-tick" in ln] == [
        ln for ln in frozen.splitlines() if "beta-tick" in ln
    ]
    tmux("send-keys", "-t", "w", "c")
    # abort with confirmation: n cancels, y aborts
    tmux("send-keys", "-t", "w", "a")
    wait_for(lambda: "abort beta" in tmux.screen() and "y/N" in tmux.screen(), what="confirm")
    tmux("send-keys", "-t", "w", "n")
    wait_for(lambda: "abort cancelled" in tmux.screen(), what="cancel")
    assert not list(layout.runs.glob("*/ABORT"))
    tmux("send-keys", "-t", "w", "a")
    wait_for(lambda: "y/N" in tmux.screen(), what="confirm again")
    tmux("send-keys", "-t", "w", "y")
    wait_for(lambda: list(layout.runs.glob("*beta*/ABORT")), what="ABORT marker for beta")
    assert not list(layout.runs.glob("*alpha*/ABORT"))
    wait_for(lambda: "abort requested: beta" in tmux.screen(), what="abort confirmation")
    tmux("send-keys", "-t", "w", "q")
    wait_for(lambda: "MODES-END" in tmux.screen(), what="watch to quit")
    restored = tmux.screen().split("EXIT=0", 1)[1].split()
    assert restored[:2] == ["icanon", "echo"]  # cooked mode and echo are back
    (
        layout.runs / next(p.name for p in layout.runs.iterdir() if "alpha" in p.name) / "ABORT"
    ).touch()


def test_watch_abort_asks_first_and_typed_ahead_keys_do_not_answer(
    layout: Layout, watchers, config_file: Path, tmux: Tmux
) -> None:
    """'a' then 'y' in one go (a paste, fast fingers) only asks; the 'y' typed before the
    question was on the screen is dropped, Enter is no, and only a later 'y' aborts."""
    drop(layout, "gamma", bash("while true; do echo gamma-tick; sleep 0.2; done"))
    watchers.start()
    start_watch(tmux, layout, config_file)
    wait_for(lambda: "[gamma]" in tmux.screen(), what="gamma running")
    tmux("send-keys", "-t", "w", "a", "y")  # one write: 'y' is typed ahead of the question
    wait_for(lambda: "abort gamma" in tmux.screen() and "y/N" in tmux.screen(), what="asked")
    assert not list(layout.runs.glob("*/ABORT"))
    tmux("send-keys", "-t", "w", "Enter")  # the default is no
    wait_for(lambda: "abort cancelled" in tmux.screen(), what="Enter cancels")
    assert not list(layout.runs.glob("*/ABORT"))
    tmux("send-keys", "-t", "w", "a")
    wait_for(lambda: "y/N" in tmux.screen(), what="asked again")
    tmux("send-keys", "-t", "w", "y")
    wait_for(lambda: list(layout.runs.glob("*gamma*/ABORT")), what="ABORT marker for gamma")
    tmux("send-keys", "-t", "w", "q")
    wait_for(lambda: "MODES-END" in tmux.screen(), what="watch to quit")


def test_watch_ctrl_c_restores_terminal(layout: Layout, config_file: Path, tmux: Tmux) -> None:
    start_watch(tmux, layout, config_file)
    wait_for(lambda: "no running jobs" in tmux.screen(), what="the view")
    assert "watcher NONE" in tmux.screen()  # no heartbeat file: no watcher serves the root
    tmux("send-keys", "-t", "w", "C-c")
    wait_for(lambda: "MODES-END" in tmux.screen(), what="watch to end on Ctrl+C")
    after = tmux.screen().split("EXIT=", 1)[1].split()
    assert after[0] == "0" and after[1:3] == ["icanon", "echo"]


def test_watch_says_which_budget_holds_queued_jobs(
    layout: Layout, config_file: Path, tmux: Tmux
) -> None:
    config_file.write_text(
        config_file.read_text()
        + '[budgets]\ntimezone = "UTC"\n[budgets.groups.app]\ndaily_usd = 1\n'
    )
    now = datetime.now(UTC)
    for n, state in ((1, JobState.SUCCEEDED), (2, JobState.QUEUED)):
        rec = JobRecord(
            id=f"{now:%Y%m%d-%H%M%S}-00{n}-j{n}-0001", name=f"j{n}", state=state, agent="claude",
            reason=Reason.COMPLETED if n == 1 else None, host="h", group="app",
            inbox_path=f"inbox/app/j{n}.prompt.md", created_at=now,
            finished_at=now if n == 1 else None, usage=Usage(cost_usd=2.5) if n == 1 else None,
        )  # fmt: skip
        layout.run_dir(rec.id).mkdir(parents=True)
        write_record(layout.run_dir(rec.id), rec, durable=False)
        file_spends(layout, [rec])
    start_watch(tmux, layout, config_file)
    wait_for(lambda: "1 held: group app spent $2.50 of $1.00 today" in tmux.screen(), what="hold")
    tmux("send-keys", "-t", "w", "q")
    wait_for(lambda: "MODES-END" in tmux.screen(), what="watch to quit")
