"""Each row says why: a failed job's error line, a queued job's wait (core/waits.py's words,
from the scheduler's own decision), and watcher health on /api/overview from the heartbeat
files (as hopper doctor judges them), with a banner when no watcher serves queued work."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from hopper.config import Config
from hopper.core import waits
from hopper.core.states import JobState, Reason
from hopper.store.layout import Layout
from hopper.store.watchers import write_beat
from hopper.web.app import create_app
from web.webtools import TOKEN, make_job


@pytest.fixture
def one_slot(layout: Layout) -> Iterator[TestClient]:
    app = create_app(layout, TOKEN, Config(max_parallel=1))
    with TestClient(app, base_url="http://127.0.0.1:8642") as client:
        client.headers["authorization"] = f"Bearer {TOKEN}"
        yield client


def beat(layout: Layout) -> str:
    return str(
        write_beat(
            layout, host="h1", pid=4242, owner="h1:4242:1.0", started=1.0, running=0, queued=0
        )
    )


def why(client: TestClient, query: str = "") -> dict[str, str]:
    body = client.get("/api/page?" + query).json()
    return dict(body["why"])


def test_a_failed_row_has_its_exit_code_and_error_line(
    layout: Layout, one_slot: TestClient
) -> None:
    run = make_job(layout, "job-f", JobState.FAILED, exit_code=2, detail="exited 2")
    (run / "job.log").write_text("building\n\x1b[31merror: linker failed\x1b[0m\nbye\n")
    make_job(layout, "job-g", JobState.FAILED, exit_code=1)  # no job.log
    body = one_slot.get("/api/page?state=failed").json()
    assert body["why"] == {"job-f": "error: linker failed"}
    assert [(j["id"], j["exit_code"], j["reason"]) for j in body["jobs"]] == [
        ("job-g", 1, "exit_nonzero"),
        ("job-f", 2, "exit_nonzero"),
    ]


def test_a_linked_log_is_not_read_for_the_error_line(layout: Layout, one_slot: TestClient) -> None:
    secret = layout.root.parent / "secret"
    secret.write_text("error: the secret\n")
    run = make_job(layout, "job-f", JobState.FAILED, exit_code=2)
    os.symlink(secret, run / "job.log")
    assert why(one_slot) == {}


def test_queued_rows_say_what_they_wait_for(layout: Layout, one_slot: TestClient) -> None:
    beat(layout)
    make_job(layout, "job-1-run", JobState.RUNNING, pid=1)
    make_job(layout, "job-2-slot", JobState.QUEUED)
    make_job(layout, "job-3-after", JobState.QUEUED, after=["builder"])
    make_job(layout, "job-4-session", JobState.QUEUED, session="chat")
    make_job(layout, "job-5-session", JobState.QUEUED, session="chat")
    make_job(layout, "job-6-builder", JobState.RUNNING, name="builder", pid=2)
    assert why(one_slot, "state=queued") == {
        "job-2-slot": "all slots busy",
        "job-3-after": "waiting for builder",
        "job-4-session": "all slots busy",
        "job-5-session": "waiting for session chat's turn",
    }


def test_a_free_queued_job_starts_next_or_waits_for_a_watcher(
    layout: Layout, one_slot: TestClient
) -> None:
    make_job(layout, "job-q", JobState.QUEUED)
    assert why(one_slot) == {"job-q": waits.NO_WATCHER}
    beat(layout)
    assert why(one_slot) == {"job-q": waits.STARTS_NEXT}


def test_pause_markers_are_named(layout: Layout, one_slot: TestClient) -> None:
    make_job(layout, "job-q", JobState.QUEUED, group="nightly")
    (layout.inbox / "nightly").mkdir()
    (layout.inbox / "nightly" / "PAUSE").touch()
    assert why(one_slot) == {"job-q": waits.paused_group("nightly")}
    (layout.root / "PAUSE").touch()
    assert why(one_slot) == {"job-q": waits.PAUSED_ALL}


def test_overview_says_no_watcher_serves_and_the_banner_names_the_work(
    layout: Layout, one_slot: TestClient
) -> None:
    body = one_slot.get("/api/overview").json()
    assert body["watcher"] == "none" and body["banner"] is None  # nothing waits
    assert "no heartbeat file" in body["watcher_detail"]
    for n in range(3):
        make_job(layout, f"job-r{n}", JobState.RUNNING, pid=1)
    make_job(layout, "job-q", JobState.QUEUED)
    body = one_slot.get("/api/overview").json()
    assert body["watcher"] == "none"
    assert body["banner"].startswith('No watcher serves this root: 3 "running", 1 queued')
    assert "hopper run" in body["banner"]


def test_overview_trusts_a_fresh_heartbeat_file_and_not_a_dead_one(
    layout: Layout, one_slot: TestClient
) -> None:
    make_job(layout, "job-q", JobState.QUEUED)
    path = beat(layout)
    body = one_slot.get("/api/overview").json()
    assert (body["watcher"], body["banner"], body["watchers"]) == ("serving", None, {"alive": 1})
    old = time.time() - 3600
    os.utime(path, (old, old))
    body = one_slot.get("/api/overview").json()
    assert (body["watcher"], body["watchers"]) == ("none", {"dead": 1})
    assert "1 queued" in body["banner"]
    assert body["reasons"] == [r.value for r in Reason]


def test_a_budget_hold_is_the_watchers_own_sentence(layout: Layout, one_slot: TestClient) -> None:
    held = "budget agent claude daily reached: $5.02 of $5.00 spent; resets at 00:00"
    make_job(layout, "job-q", JobState.QUEUED, agent="claude", waiting=held)
    beat(layout)
    assert why(one_slot) == {"job-q": held}
