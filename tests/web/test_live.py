"""Live updates under a real uvicorn: pushed from inotify events, not polled.

The server's rescan fallback is set to 30 s, so anything a test sees within
its 10 s wait came through the file events.
"""

from __future__ import annotations

import json

import httpx

from hopper.core.states import JobState, Reason
from hopper.store.layout import Layout
from web.webtools import TOKEN, LiveServer, Stream, make_job


def open_stream(live: LiveServer, streams: list[Stream], path: str) -> Stream:
    s = Stream(live.url + path)
    streams.append(s)
    return s


def test_job_list_stream_pushes_each_change(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    make_job(layout, "job-q", JobState.QUEUED)
    s = open_stream(live, streams, "/api/jobs")
    assert json.loads(s.wait_for("hello")[0])["paused"] is False
    make_job(layout, "job-q", JobState.RUNNING, pid=1234)
    data, _ = s.wait_for("job")
    assert (json.loads(data)["id"], json.loads(data)["state"]) == ("job-q", "running")
    make_job(layout, "job-q", JobState.SUCCEEDED)
    assert json.loads(s.wait_for("job")[0])["state"] == "succeeded"
    make_job(layout, "job-new", JobState.QUEUED)  # a new run directory
    assert json.loads(s.wait_for("job")[0])["id"] == "job-new"
    (layout.root / "PAUSE").touch()
    assert json.loads(s.wait_for("pause")[0]) == {"paused": True}


def test_log_stream_backlog_live_lines_then_end(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    run = make_job(layout, "job-r", JobState.RUNNING)
    log = run / "job.log"
    log.write_bytes(b"first\n")
    s = open_stream(live, streams, "/api/jobs/job-r/log")
    assert s.response.headers["content-type"].startswith("text/event-stream")
    assert json.loads(s.wait_for("log")[0]) == "first\n"
    with log.open("ab") as fh:
        fh.write("second \u00e9".encode()[:-1])  # half of a two-byte character
        fh.flush()
        assert json.loads(s.wait_for("log")[0]) == "second "
        fh.write("\u00e9".encode()[-1:] + b"\n\x1b[32mgreen\x1b[0m\n")
    assert json.loads(s.wait_for("log")[0]) == "\u00e9\n\x1b[32mgreen\x1b[0m\n"
    with log.open("ab") as fh:
        fh.write(b"last words, no newline")
    make_job(layout, "job-r", JobState.FAILED, reason=Reason.EXIT_NONZERO, exit_code=3)
    data, before = s.wait_for("end")
    assert json.loads(data) == {"state": "failed"}
    assert "last words, no newline" in "".join(json.loads(d) for e, d in before if e == "log")
    assert s.ended() == []


def test_two_followers_get_the_same_bytes_once_each(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    run = make_job(layout, "job-2", JobState.RUNNING)
    a = open_stream(live, streams, "/api/jobs/job-2/log")
    a.wait_for("start")
    with (run / "job.log").open("ab") as fh:
        fh.write(b"one\n")
    assert json.loads(a.wait_for("log")[0]) == "one\n"
    b = open_stream(live, streams, "/api/jobs/job-2/log")
    assert json.loads(b.wait_for("log")[0]) == "one\n"  # the backlog, exactly up to now
    with (run / "job.log").open("ab") as fh:
        fh.write(b"two\n")
    assert json.loads(a.wait_for("log")[0]) == "two\n"
    assert json.loads(b.wait_for("log")[0]) == "two\n"


def test_events_stream_live(layout: Layout, live: LiveServer, streams: list[Stream]) -> None:
    run = make_job(layout, "job-e", JobState.RUNNING)
    (run / "events.jsonl").write_text('{"ts": "t0", "event": "claimed"}\n')
    s = open_stream(live, streams, "/api/jobs/job-e/events")
    assert json.loads(s.wait_for("event")[0])["event"] == "claimed"
    with (run / "events.jsonl").open("a") as fh:
        fh.write('{"ts": "t1", "event": "started", "pid": 9}\n')
    assert json.loads(s.wait_for("event")[0]) == {"ts": "t1", "event": "started", "pid": 9}
    make_job(layout, "job-e", JobState.SUCCEEDED)
    assert json.loads(s.wait_for("end")[0]) == {"state": "succeeded"}


def test_a_replaced_log_starts_over(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    run = make_job(layout, "job-x", JobState.RUNNING)
    (run / "job.log").write_bytes(b"attempt one\n")
    s = open_stream(live, streams, "/api/jobs/job-x/log")
    s.wait_for("log")
    (run / "job.log").rename(run / "job.1.log")
    (run / "job.log").write_bytes(b"attempt two\n")
    s.wait_for("reset")
    assert json.loads(s.wait_for("log")[0]) == "attempt two\n"


def test_compression_leaves_the_live_streams_streaming(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    """A browser accepts gzip on every request: the list stream and a log stream still go
    out uncompressed, frame by frame, while the JSON answers are compressed."""
    run = make_job(layout, "job-z", JobState.RUNNING)
    (run / "job.log").write_bytes(b"one\n")
    gz = {"accept-encoding": "gzip"}
    jobs = Stream(live.url + "/api/jobs", gz)
    streams.append(jobs)
    log = Stream(live.url + "/api/jobs/job-z/log", gz)
    streams.append(log)
    for s in (jobs, log):
        assert "content-encoding" not in s.response.headers
    jobs.wait_for("hello")
    assert json.loads(log.wait_for("log")[0]) == "one\n"
    with (run / "job.log").open("ab") as fh:
        fh.write(b"two\n")
    assert json.loads(log.wait_for("log")[0]) == "two\n"  # one small frame, not buffered
    make_job(layout, "job-z", JobState.SUCCEEDED)
    # The list may first stream job-z as it was (running: its log grew); the change to
    # succeeded follows, within a few frames.
    states = [json.loads(jobs.wait_for("job")[0])["state"]]
    while states[-1] != "succeeded" and len(states) < 5:
        states.append(json.loads(jobs.wait_for("job")[0])["state"])
    assert states[-1] == "succeeded" and set(states[:-1]) <= {"running"}, states
    for n in range(40):
        make_job(layout, f"job-{n:02d}", JobState.FAILED, reason=Reason.EXIT_NONZERO)
    r = httpx.get(live.url + "/api/page", headers={**gz, "authorization": f"Bearer {TOKEN}"})
    assert r.headers["content-encoding"] == "gzip"
    assert int(r.headers["content-length"]) < len(r.content) / 4  # httpx decoded it
    assert r.json()["counts"]["failed"] == 40


CAST_HEADER = {"version": 2, "width": 100, "height": 30, "timestamp": 1795600000}


def cast_line(record: object) -> bytes:
    return json.dumps(record).encode() + b"\n"


def test_an_interactive_jobs_terminal_cast_is_replayed_then_followed(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    run = make_job(layout, "job-i", JobState.RUNNING)
    cast = run / "terminal.cast"
    cast.write_bytes(
        cast_line(CAST_HEADER) + cast_line([0.1, "o", "\x1b[1mhello\x1b[0m\r\n"]) + b"[0.2, tor"
    )
    s = open_stream(live, streams, "/api/jobs/job-i/cast")
    assert json.loads(s.wait_for("start")[0]) == {"cut": False}
    assert json.loads(s.wait_for("cast")[0]) == CAST_HEADER
    assert json.loads(s.wait_for("cast")[0]) == [0.1, "o", "\x1b[1mhello\x1b[0m\r\n"]
    with cast.open("ab") as fh:  # the torn line completed, then a resize
        fh.write(b'n", "o", "x"]\n' + cast_line([0.3, "r", "120x40"]))
    data, skipped = s.wait_for("cast")
    assert json.loads(data) == [0.3, "r", "120x40"]  # "[0.2, torn…" was never a record
    assert not [d for e, d in skipped if e == "cast"]
    make_job(layout, "job-i", JobState.SUCCEEDED)
    s.wait_for("end")
    whole = httpx.get(
        live.url + "/api/jobs/job-i/cast", headers={"authorization": f"Bearer {TOKEN}"}
    )
    assert whole.content == cast.read_bytes()
    make_job(layout, "job-plain", JobState.RUNNING)
    none = httpx.get(
        live.url + "/api/jobs/job-plain/cast", headers={"authorization": f"Bearer {TOKEN}"}
    )
    assert none.status_code == 404 and "not an interactive job" in none.json()["error"]


def test_a_cut_cast_backlog_still_starts_with_its_header(
    layout: Layout, live: LiveServer, streams: list[Stream]
) -> None:
    run = make_job(layout, "job-long", JobState.RUNNING)
    body = b"".join(
        cast_line([i / 10, "o", f"line {i:06d} " + "x" * 80 + "\r\n"]) for i in range(4000)
    )
    (run / "terminal.cast").write_bytes(cast_line(CAST_HEADER) + body)  # ~400 KB: over the backlog
    s = open_stream(live, streams, "/api/jobs/job-long/cast")
    assert json.loads(s.wait_for("start")[0]) == {"cut": True}
    assert json.loads(s.wait_for("cast")[0]) == CAST_HEADER
    first = json.loads(s.wait_for("cast")[0])
    assert first[1] == "o" and first[2].startswith("line ") and first[0] > 0
