"""``hopper doctor`` and ``hopper watchers`` say which watcher serves *this* root.

Only a fresh heartbeat file under the root counts (a ``hopper run`` on the host
may serve another root); dead and taken-over watchers are shown as such, with
no counts, and doctor's advice names only commands hopper has.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import Watchers, bash, drop, hopper_cmd, wait_for
from hopper.cli.doctor.check import FIX_FREE_SPACE, Check
from hopper.cli.doctor.root import check_free_space
from hopper.cli.doctor.watcher import FIX_START, check_degraded, root_watcher_processes
from hopper.cli.main import COMMANDS
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.proc import identity
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.watchers import beat_files, write_beat


def plant_beat(layout: Layout, host: str, pid: int, age: float, jobs: tuple[str, ...] = ()) -> None:
    path = write_beat(
        layout,
        host=host,
        pid=pid,
        owner=f"{host}:{pid}:1.0",
        started=1.0,
        running=len(jobs),
        queued=5,
        jobs=jobs,
    )
    then = time.time() - age
    os.utime(path, (then, then))


def running_job(layout: Layout, job_id: str, owner: str) -> None:
    run_dir = layout.run_dir(job_id)
    run_dir.mkdir(parents=True)
    now = datetime.now(UTC)
    record = JobRecord(
        id=job_id,
        name=job_id,
        state=JobState.RUNNING,
        agent="bash",
        host=owner.split(":")[0],
        owner=owner,
        inbox_path=f"inbox/{job_id}.prompt.md",
        created_at=now,
        started_at=now,
        heartbeat_at=now,
    )
    write_record(run_dir, record, durable=False)


def watchers_json(hopper: Any) -> list[dict[str, Any]]:
    result = hopper("watchers", "--json")
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_a_watcher_of_another_root_does_not_serve_this_one(
    layout: Layout, watchers: Watchers, hopper, tmp_path: Path, config_file: Path
) -> None:
    proc = watchers.start()
    wait_for(lambda: beat_files(layout), what="the watcher's heartbeat file")
    other = Layout(tmp_path / "other")
    other.ensure()
    drop(other, "waits", bash("echo hi"))

    here = hopper("doctor", "--json")
    served = next(c for c in json.loads(here.stdout) if c["name"] == "watcher")
    assert served["status"] == "ok", served
    assert (
        f"serving this root: 1 watcher(s) beating, {os.uname().nodename} pid {proc.pid}"
        in (served["message"])
    )

    result = subprocess.run(  # the fixture's own --root would come last and win
        hopper_cmd("doctor", "--json", "--root", str(other.root), "--config", str(config_file)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    check = next(c for c in json.loads(result.stdout) if c["name"] == "watcher")
    assert result.returncode == 1
    assert check["status"] == "fail", check
    assert "no watcher serves this root: no heartbeat file" in check["message"]
    # other `hopper run`s on the host are listed too: the first five, and how many more
    # (on a busy machine ours may be past the fifth)
    listed = re.search(
        r"a hopper run process on this host \(pid ([0-9, ]+)( and \d+ more)?\) writes no "
        "heartbeat here: it serves another root",
        check["message"],
    )
    assert listed, check["message"]
    assert str(proc.pid) in listed[1].split(", ") or listed[2], check["message"]
    assert "1 prompts wait in the inbox" in check["message"]
    # nor is the root degraded for a watcher of another root (doctor's process guess was
    # any `hopper run` on the host)
    writable_failed = Check("writable", "fail", "Read-only file system")
    assert root_watcher_processes(other) == []
    assert check_degraded(writable_failed, lambda: root_watcher_processes(other)).status == "ok"
    assert [pid for pid, _ in root_watcher_processes(layout)] == [proc.pid]
    degraded = check_degraded(writable_failed, lambda: root_watcher_processes(layout))
    assert degraded.status == "fail" and f"(pid {proc.pid})" in degraded.message


def test_a_killed_watcher_is_dead_at_once_and_serves_nothing(
    layout: Layout, watchers: Watchers, hopper
) -> None:
    proc = watchers.start()
    wait_for(lambda: beat_files(layout), what="the watcher's heartbeat file")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    rows = watchers_json(hopper)
    assert [(r["pid"], r["state"]) for r in rows] == [(proc.pid, "dead")]
    assert f"its process {proc.pid} is gone" in rows[0]["detail"]
    table = hopper("watchers").stdout.splitlines()
    assert re.search(rf"\b{proc.pid}\s+dead\s+\S+s\s+-\s+-\s", table[1]), table
    drop(layout, "waits", bash("echo hi"))
    doctor = hopper("doctor", "--json")
    check = next(c for c in json.loads(doctor.stdout) if c["name"] == "watcher")
    assert check["status"] == "fail"
    assert "no heartbeat file is fresh (also 1 dead)" in check["message"]


def test_stale_and_taken_over_heartbeats_are_shown_as_such(layout: Layout, hopper) -> None:
    plant_beat(layout, "gone-host", 11, age=600)
    plant_beat(layout, "h1", 12, age=600, jobs=("20261126-000000-a-0001",))
    running_job(layout, "20261126-000000-a-0001", "h2:99:5.0")  # h2 took it over
    plant_beat(layout, "h3", 13, age=600, jobs=("20261126-000000-b-0001",))
    running_job(layout, "20261126-000000-b-0001", "h3:13:1.0")  # not taken over yet
    plant_beat(layout, "h2", 99, age=1)

    rows = {r["host"]: r for r in watchers_json(hopper)}
    assert {h: r["state"] for h, r in rows.items()} == {
        "gone-host": "dead",
        "h1": "taken_over",
        "h2": "alive",
        "h3": "dead",
    }
    assert rows["gone-host"]["detail"] == "no heartbeat for 10m"
    assert rows["h1"]["detail"] == "no heartbeat for 10m; its 1 job(s) taken over by h2"
    assert "1 of its jobs still name it as owner" in rows["h3"]["detail"]
    lines = hopper("watchers").stdout.splitlines()
    assert lines[1].split()[:3] == ["h2", "99", "alive"]  # the alive first, counts current
    assert lines[1].split()[4:6] == ["0", "5"]
    for line in lines[2:]:
        assert line.split()[4:6] == ["-", "-"], line  # a dead watcher's counts are old

    check = next(c for c in json.loads(hopper("doctor", "--json").stdout) if c["name"] == "watcher")
    assert check["status"] == "ok"
    assert "1 watcher(s) beating, h2 pid 99" in check["message"]
    assert "(also 2 dead, 1 taken_over)" in check["message"]


def test_only_stale_heartbeats_mean_no_watcher(layout: Layout, hopper) -> None:
    plant_beat(layout, os.uname().nodename + "-old", 11, age=600)
    check = next(c for c in json.loads(hopper("doctor", "--json").stdout) if c["name"] == "watcher")
    assert check["status"] == "warn"  # nothing waits: no watcher, nothing late yet
    assert (
        "no watcher serves this root: no heartbeat file is fresh (also 1 dead)"
        in (check["message"])
    )
    plant_beat(layout, "slow-host", 12, age=45)  # alive (< host_dead_after) but late
    check = next(c for c in json.loads(hopper("doctor", "--json").stdout) if c["name"] == "watcher")
    assert check["status"] == "warn"
    assert re.search(r"watcher slow-host pid 12 last beat \d+s ago", check["message"])  # 45s + load


def test_doctor_advice_names_only_commands_that_exist(tmp_path: Path) -> None:
    Vfs = type("Vfs", (), {"f_files": 100, "f_favail": 10})
    full = check_free_space(tmp_path, usage=lambda _: (10**9, 10**9, 1), statvfs=lambda _: Vfs())
    degraded = check_degraded(
        Check("writable", "fail", "No space left on device"),
        processes=lambda: [(42, ["hopper", "run"])],
    )
    for fix in (full.fix, degraded.fix, FIX_START, FIX_FREE_SPACE):
        named = re.findall(r"(?<!-u )\bhopper ([a-z]+)", fix)  # not "journalctl -u hopper"
        assert named, fix
        assert set(named) <= set(COMMANDS), fix


def test_watchers_prune_removes_dead_files_whose_jobs_are_not_theirs(
    layout: Layout, hopper
) -> None:
    plant_beat(layout, "gone-host", 11, age=600)
    plant_beat(layout, "h1", 12, age=600, jobs=("20261126-000000-a-0001",))
    running_job(layout, "20261126-000000-a-0001", "h2:99:5.0")  # h2 took it over
    plant_beat(layout, "h3", 13, age=600, jobs=("20261126-000000-b-0001",))
    running_job(layout, "20261126-000000-b-0001", "h3:13:1.0")  # still h3's
    plant_beat(layout, "h2", 99, age=1)

    result = hopper("watchers", "--prune", "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert sorted((r["host"], r["pid"]) for r in answer["removed"]) == [
        ("gone-host", 11),
        ("h1", 12),
    ]
    assert {r["host"]: r["state"] for r in answer["watchers"]} == {"h2": "alive", "h3": "dead"}
    assert sorted(p.name for p in beat_files(layout)) == ["h2--99.json", "h3--13.json"]

    plant_beat(layout, "late", 14, age=600)
    lines = hopper("watchers", "--prune").stdout.splitlines()
    assert lines[0] == "removed late--14.json: late pid 14, dead"
    assert lines[1].split()[:3] == ["HOST", "PID", "STATE"]


def test_hopper_watch_says_whether_a_watcher_serves_the_root(layout: Layout) -> None:
    """Its status bar reads the heartbeat files, not the jobs: with nothing running a
    live watcher is still ``alive``, and one that died is ``NONE``."""
    from hopper.cli.watch import watcher_health
    from hopper.cli.watcherlist import watcher_rows

    def health() -> str:
        return watcher_health(watcher_rows(layout, time.time(), 60), 30)

    assert health() == "NONE"  # no file
    plant_beat(layout, "gone", 11, age=600)
    assert health() == "NONE"  # only a dead one
    plant_beat(layout, "slow", 12, age=45)
    assert health() == "LATE (45s ago)"
    plant_beat(layout, "h2", 13, age=2)
    assert health() == "alive"


def test_a_degraded_watchers_stale_file_still_names_it_while_its_process_runs(
    layout: Layout,
) -> None:
    """A watcher on a root that takes no writes cannot rewrite its heartbeat: doctor still
    finds it (its process runs); a file whose process is gone, or of another host, is no
    watcher."""
    host, me = socket.gethostname(), os.getpid()
    start = identity.start_time(me)
    # the one that counts last: the others are moved aside to names of their own
    for pid, started, name in ((me, 1.0, host), (me, start, "elsewhere"), (me, start, host)):
        path = write_beat(
            layout,
            host=name,
            pid=pid,
            owner=f"{name}:{pid}:{started}",
            started=1.0,
            running=0,
            queued=0,
        )
        then = time.time() - 3600
        os.utime(path, (then, then))
        if started == 1.0 or name == "elsewhere":
            path.rename(path.with_name(f"{name}--{pid}-{started}.json"))
    assert root_watcher_processes(layout) == [(me, ["hopper", "run"])]
