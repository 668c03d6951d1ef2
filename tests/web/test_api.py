"""The JSON API in-process (Starlette's TestClient): every endpoint, every refusal."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hopper.core.redaction import redact
from hopper.core.states import JobState
from hopper.store.layout import Layout
from hopper.web.app import create_app
from hopper.web.gate import cookie_name, session_value
from web.webtools import TOKEN, make_job, usage

ENDPOINTS = [
    ("GET", "/ui/"),
    ("GET", "/static/app.js"),
    ("GET", "/ui/static/app.js"),
    ("GET", "/ui/api/jobs"),
    ("POST", "/ui/api/submit"),
    ("GET", "/api/jobs"),
    ("GET", "/api/page"),
    ("GET", "/api/overview"),
    ("GET", "/api/usage"),
    ("GET", "/api/jobs/job-a"),
    ("GET", "/api/jobs/job-a/log"),
    ("GET", "/api/jobs/job-a/events"),
    ("GET", "/api/jobs/job-a/result"),
    ("POST", "/api/jobs/job-a/abort"),
    ("POST", "/api/jobs/job-a/retry"),
    ("POST", "/api/submit"),
    ("POST", "/api/pause"),
    ("POST", "/api/resume"),
]


@pytest.fixture
def jobs(layout: Layout) -> Layout:
    make_job(layout, "job-a", name="secret-name-a", agent="claude", usage=usage(0.5, 1000))
    run = make_job(layout, "job-b", JobState.RUNNING, name="nightly-b", group="team")
    (run / "job.log").write_text("line one\n\x1b[31mred\x1b[0m\n")
    (run / "events.jsonl").write_text(
        '{"ts": "2026-11-22T01:00:00+00:00", "event": "claimed"}\n'
        "not json\n"
        '{"ts": "2026-11-22T01:00:01+00:00", "event": "started", "pid": 7}\n'
    )
    make_job(layout, "job-c", JobState.FAILED, name="nightly-c", usage=usage(0.25, 10))
    make_job(layout, "job-d", JobState.QUEUED, name="later-d", agent="codex")
    return layout


# --- who may ask ------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_no_token_is_401_without_job_data(
    jobs: Layout, app_client: TestClient, method: str, path: str
) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic x"}):
        r = app_client.request(method, path, headers=headers, json={"body": "x"})
        assert r.status_code == 401, (path, headers)
        assert "secret-name-a" not in r.text and "job-a" not in r.text
        assert "token" in r.text
    assert not (jobs.run_dir("job-a") / "ABORT").exists()
    assert not (jobs.root / "PAUSE").exists()


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_wrong_cookie_or_query_token_is_401(
    jobs: Layout, app_client: TestClient, method: str, path: str
) -> None:
    app_client.cookies.set(cookie_name(TOKEN), "nope")
    r = app_client.request(method, path)
    assert r.status_code == 401
    r = app_client.request(method, path + "?token=nope", follow_redirects=False)
    assert r.status_code == 401


def test_query_token_becomes_a_strict_httponly_session_cookie(
    jobs: Layout, app_client: TestClient
) -> None:
    r = app_client.get(f"/?token={TOKEN}&x=1", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/?x=1"  # the token leaves the address bar
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={session_value(TOKEN)};")
    assert TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui/;" in cookie
    page = app_client.get("/ui/")  # the client keeps the cookie
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert app_client.get("/ui/api/jobs/job-a").json()["name"] == "secret-name-a"
    assert app_client.get("/ui/static/app.js").status_code == 200
    # the token on an API URL signs in to that URL's copy under /ui/
    r = app_client.get(f"/api/jobs/job-a?token={TOKEN}", follow_redirects=False)
    assert r.headers["location"] == "/ui/api/jobs/job-a"


def test_an_older_hoppers_token_cookie_is_cleared_and_hides_no_session(
    jobs: Layout, app_client: TestClient
) -> None:
    """Before issue 27 the cookie was the token, Path=/: signing in deletes it, and while a
    browser still sends it beside the session cookie, the session still counts."""
    r = app_client.get(f"/?token={TOKEN}", follow_redirects=False)
    cookies = r.headers.get_list("set-cookie")
    assert f"{cookie_name(TOKEN)}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" in cookies
    app_client.cookies.clear()
    name, session = cookie_name(TOKEN), session_value(TOKEN)
    for both in (f"{name}={session}; {name}={TOKEN}", f"{name}={TOKEN}; {name}={session}"):
        assert app_client.get("/ui/api/jobs", headers={"cookie": both}).status_code == 200
    assert app_client.get("/ui/api/jobs", headers={"cookie": f"{name}={TOKEN}"}).status_code == 401


def test_the_bare_addresses_lead_into_the_dashboard_without_data(
    jobs: Layout, app_client: TestClient
) -> None:
    for path in ("/", "/ui"):
        r = app_client.get(path, follow_redirects=False)
        assert (r.status_code, r.headers["location"], r.text) == (303, "/ui/", "")
        assert "set-cookie" not in r.headers


def test_the_session_cookie_is_no_bearer_token_and_dies_with_the_token(
    jobs: Layout, app_client: TestClient
) -> None:
    """What a listener on another port of 127.0.0.1 receives is the cookie's value: it is
    not the token, it is refused as Bearer and outside /ui/, and a new token kills it."""
    session = session_value(TOKEN)
    assert session != TOKEN and TOKEN not in session
    submit = {"body": "echo stolen", "agent": "bash"}
    bearer = {"authorization": f"Bearer {session}"}
    for method, path in ENDPOINTS:
        assert app_client.request(method, path, headers=bearer).status_code == 401, path
    app_client.cookies.set(cookie_name(TOKEN), session)
    csrf = {"x-hopper-csrf": "1"}
    assert app_client.post("/api/submit", json=submit, headers=csrf).status_code == 401
    assert app_client.get("/api/jobs").status_code == 401
    assert not list(jobs.inbox.glob("*.prompt.md"))
    # the old cookie's name and value never matched: the raw token as a cookie is refused
    app_client.cookies.set(cookie_name(TOKEN), TOKEN)
    assert app_client.get("/ui/api/jobs").status_code == 401
    # after a new token (hopper web --new-token), the old session is worthless
    other = "u" * 43
    with TestClient(create_app(jobs, other), base_url="http://127.0.0.1:8642") as rotated:
        rotated.cookies.set(cookie_name(other), session)
        rotated.cookies.set(cookie_name(TOKEN), session)
        assert rotated.get("/ui/api/jobs").status_code == 401
        assert rotated.post("/ui/api/submit", json=submit, headers=csrf).status_code == 401
        rotated.cookies.set(cookie_name(other), session_value(other))
        assert rotated.get("/ui/api/jobs").status_code == 200
    assert not list(jobs.inbox.glob("*.prompt.md"))


def test_a_token_in_a_post_query_is_refused(jobs: Layout, app_client: TestClient) -> None:
    r = app_client.post(f"/api/pause?token={TOKEN}")
    assert r.status_code == 401
    assert not (jobs.root / "PAUSE").exists()


def test_cookie_post_needs_the_csrf_header_and_our_origin(
    jobs: Layout, app_client: TestClient
) -> None:
    app_client.cookies.set(cookie_name(TOKEN), session_value(TOKEN))
    r = app_client.post("/ui/api/pause")
    assert r.status_code == 403
    assert "x-hopper-csrf" in r.json()["error"]
    r = app_client.post(
        "/ui/api/pause", headers={"x-hopper-csrf": "1", "origin": "http://evil.example"}
    )
    assert r.status_code == 403
    assert "evil.example" in r.json()["error"]
    assert not (jobs.root / "PAUSE").exists()
    r = app_client.post(
        "/ui/api/pause", headers={"x-hopper-csrf": "1", "origin": "http://127.0.0.1:8642"}
    )
    assert r.status_code == 200, r.text
    assert (jobs.root / "PAUSE").exists()


def test_state_changes_are_post_only(jobs: Layout, client: TestClient) -> None:
    for path in ("/api/pause", "/api/resume", "/api/submit", "/api/jobs/job-b/abort"):
        assert client.get(path).status_code == 405
    assert not (jobs.run_dir("job-b") / "ABORT").exists()


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs/../log",
        "/api/jobs/%2e%2e/log",
        "/api/jobs/..%2Fjob-a/log",
        "/api/jobs/job-a%2Flog",
        "/api/jobs/.hidden",
        "/api/jobs/linked",
        "/api/jobs/no-such-job",
        "/api/jobs/job-a..b/events",
        "/api/jobs/%00/log",
    ],
)
def test_ids_must_be_run_directories(jobs: Layout, client: TestClient, path: str) -> None:
    outside = jobs.root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "job.json").write_text('{"name": "outside-secret"}')
    (jobs.runs / "linked").symlink_to(outside)
    (jobs.runs / ".hidden").mkdir()
    r = client.get(path)
    assert r.status_code == 404, r.text
    assert "outside-secret" not in r.text


# --- reading --------------------------------------------------------------------


def test_list_all_jobs_is_their_job_json(jobs: Layout, client: TestClient) -> None:
    listed = client.get("/api/jobs").json()
    assert [j["id"] for j in listed] == ["job-a", "job-b", "job-c", "job-d"]
    on_disk = json.loads((jobs.run_dir("job-a") / "job.json").read_text())
    assert listed[0] == on_disk


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        ("state=running", ["job-b"]),
        ("state=failed,queued", ["job-c", "job-d"]),
        ("state=failed&state=succeeded", ["job-a", "job-c"]),
        ("agent=claude", ["job-a"]),
        ("agent=codex&agent=claude", ["job-a", "job-d"]),
        ("group=team", ["job-b"]),
        ("name=nightly-*", ["job-b", "job-c"]),
        ("since=1h", ["job-b", "job-d"]),  # the finished ones are from the past, the rest active
        ("limit=2", ["job-c", "job-d"]),
        ("limit=0", []),
    ],
)
def test_list_filters(jobs: Layout, client: TestClient, query: str, ids: list[str]) -> None:
    r = client.get(f"/api/jobs?{query}")
    assert r.status_code == 200, r.text
    assert [j["id"] for j in r.json()] == ids


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("state=done", "state: 'done' is not a state"),
        ("since=soon", "since:"),
        ("limit=-1", "limit:"),
    ],
)
def test_bad_filters_are_400(jobs: Layout, client: TestClient, query: str, reason: str) -> None:
    r = client.get(f"/api/jobs?{query}")
    assert r.status_code == 400
    assert reason in r.json()["error"]


def test_job_json_is_returned_as_written(jobs: Layout, client: TestClient) -> None:
    path = jobs.run_dir("job-b") / "job.json"
    record = json.loads(path.read_text())
    record["agent_state"] = "working"  # a field this version does not know: passed on as is
    record["last_activity_at"] = "2026-11-22T01:00:05+00:00"
    path.write_text(json.dumps(record))
    got = client.get("/api/jobs/job-b").json()
    assert got["agent_state"] == "working"
    assert got["last_activity_at"] == "2026-11-22T01:00:05+00:00"


def test_a_linked_job_json_is_not_followed(jobs: Layout, client: TestClient) -> None:
    secret = jobs.root.parent / "secret.json"
    secret.write_text('{"password": "hunter2"}')
    path = jobs.run_dir("job-a") / "job.json"
    path.unlink()
    path.symlink_to(secret)
    r = client.get("/api/jobs/job-a")
    assert r.status_code == 500
    assert "hunter2" not in r.text
    assert "symbolic link" in r.json()["error"]


def test_log_is_the_whole_text(jobs: Layout, client: TestClient) -> None:
    r = client.get("/api/jobs/job-b/log")
    assert r.status_code == 200
    assert r.text == "line one\n\x1b[31mred\x1b[0m\n"
    assert r.headers["content-type"].startswith("text/plain")
    assert client.get("/api/jobs/job-d/log").text == ""  # not started: no log yet


def test_a_linked_or_fifo_log_is_refused(jobs: Layout, client: TestClient) -> None:
    secret = jobs.root.parent / "id_rsa"
    secret.write_text("PRIVATE KEY")
    log = jobs.run_dir("job-b") / "job.log"
    log.unlink()
    log.symlink_to(secret)
    r = client.get("/api/jobs/job-b/log")
    assert r.status_code == 500 and "PRIVATE KEY" not in r.text
    log.unlink()
    os.mkfifo(log)  # would block a reader that opened it without O_NONBLOCK
    r = client.get("/api/jobs/job-b/log")
    assert r.status_code == 500
    assert "not a regular file" in r.json()["error"]


def test_events_skip_torn_lines_and_tail(jobs: Layout, client: TestClient) -> None:
    events = client.get("/api/jobs/job-b/events").json()
    assert [e["event"] for e in events] == ["claimed", "started"]
    assert [e["event"] for e in client.get("/api/jobs/job-b/events?tail=1").json()] == ["started"]
    assert client.get("/api/jobs/job-a/events").json() == []
    assert client.get("/api/jobs/job-b/events?tail=x").status_code == 400


def test_result_markdown(jobs: Layout, client: TestClient) -> None:
    run = make_job(jobs, "job-r", result_path="result.md")
    (run / "result.md").write_text("# Done\n\nAll **green**.\n")
    r = client.get("/api/jobs/job-r/result")
    assert r.status_code == 200
    assert r.text == "# Done\n\nAll **green**.\n"
    r = client.get("/api/jobs/job-a/result")
    assert r.status_code == 404
    assert "result.md" in r.json()["error"]


def test_finished_job_streams_backlog_then_end(jobs: Layout, client: TestClient) -> None:
    (jobs.run_dir("job-a") / "job.log").write_text("all done\n")
    r = client.get("/api/jobs/job-a/log", headers={"accept": "text/event-stream"})
    assert r.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in r.text.split("\n\n") if f.startswith("event:")]
    assert frames[0].startswith("event: start")
    assert frames[1] == 'event: log\ndata: "all done\\n"'
    assert frames[-1] == 'event: end\ndata: {"state": "succeeded"}'


def test_overview_counts_and_pause(jobs: Layout, client: TestClient) -> None:
    body = client.get("/api/overview").json()
    assert body["counts"] == {
        "queued": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "aborted": 0,
    }
    assert body["paused"] is False
    assert body["api"] == 1


def test_usage_by_agent_and_day(jobs: Layout, client: TestClient) -> None:
    body = client.get("/api/usage").json()
    assert body["by"] == "agent"
    rows = {r["key"]: r for r in body["rows"]}
    assert rows["claude"]["cost_usd"] == 0.5 and rows["claude"]["input_tokens"] == 1000
    assert body["total"]["cost_usd"] == 0.75
    days = client.get("/api/usage?by=day").json()["rows"]
    assert [d["key"] for d in days] == ["2026-11-22"]
    assert client.get("/api/usage?by=week").status_code == 400
    assert client.get("/api/usage?since=1h").json()["total"]["cost_usd"] == 0


# --- changing -------------------------------------------------------------------


def test_abort_creates_the_marker(jobs: Layout, client: TestClient) -> None:
    r = client.post("/api/jobs/job-b/abort")
    assert r.status_code == 202
    assert (jobs.run_dir("job-b") / "ABORT").is_file()
    assert client.post("/api/jobs/job-b/abort").status_code == 202  # idempotent, like touch


def test_abort_a_finished_job_is_409(jobs: Layout, client: TestClient) -> None:
    r = client.post("/api/jobs/job-a/abort")
    assert r.status_code == 409
    assert "already finished" in r.json()["error"]
    assert not (jobs.run_dir("job-a") / "ABORT").exists()


def test_abort_never_follows_a_planted_link(jobs: Layout, client: TestClient) -> None:
    target = jobs.root.parent / "victim"
    (jobs.run_dir("job-b") / "ABORT").symlink_to(target)
    r = client.post("/api/jobs/job-b/abort")
    assert r.status_code == 409
    assert not target.exists()


def test_pause_and_resume(jobs: Layout, client: TestClient) -> None:
    assert client.post("/api/pause").json()["paused"] is True
    assert (jobs.root / "PAUSE").is_file()
    assert client.get("/api/overview").json()["paused"] is True
    assert client.post("/api/pause", json={"group": "team"}).status_code == 200
    assert (jobs.inbox / "team" / "PAUSE").is_file()
    assert client.post("/api/resume").json()["paused"] is False
    assert not (jobs.root / "PAUSE").exists()
    r = client.post("/api/pause", json={"group": "../etc"})
    assert r.status_code == 400
    assert "is not a group" in r.json()["error"]


def test_submit_writes_a_prompt_the_safe_way(jobs: Layout, client: TestClient) -> None:
    r = client.post(
        "/api/submit",
        json={
            "name": "from-web",
            "agent": "bash",
            "workdir": "/tmp",
            "session": "s1",
            "after": "job-a, nightly-c",
            "timeout": "",
            "body": "echo hello\n",
        },
    )
    assert r.status_code == 201, r.text
    path = Path(r.json()["path"])
    assert path.parent == jobs.inbox and path.name == "from-web.prompt.md"
    text = path.read_text()
    assert text.startswith("+++\n") and text.endswith("+++\necho hello\n")
    assert 'after = ["job-a", "nightly-c"]' in text and 'session = "s1"' in text
    assert "timeout" not in text  # an empty field means the default
    assert [p.name for p in jobs.inbox.iterdir()] == ["from-web.prompt.md"]  # no temp left


def test_submit_into_a_sub_folder(jobs: Layout, client: TestClient) -> None:
    r = client.post("/api/submit", json={"body": "echo x", "agent": "bash", "to": "team"})
    assert r.status_code == 201
    assert Path(r.json()["path"]).parent == jobs.inbox / "team"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"agent": "bash"}, "body:"),
        ({"body": "   "}, "body:"),
        ([1, 2], "JSON object"),
        ({"body": "x", "colour": "red"}, "unknown key 'colour'"),
        ({"body": "x", "timeout": "soon"}, "key 'timeout'"),
        ({"body": "x", "name": "no spaces please"}, "key 'name'"),
        ({"body": "x", "priority": 5000}, "key 'priority'"),
        ({"body": "x", "agent": "gpt-17"}, "unknown agent 'gpt-17'"),
        ({"body": "x", "env": {"A": 1}}, "env:"),
        ({"body": "x", "to": "../outside"}, "inside the inbox"),
        ({"body": "x", "to": 3}, "to:"),
    ],
)
def test_bad_submit_is_400_with_a_reason(
    jobs: Layout, client: TestClient, payload: object, reason: str
) -> None:
    r = client.post("/api/submit", json=payload)
    assert r.status_code == 400, r.text
    assert reason in r.json()["error"]
    assert list(jobs.inbox.rglob("*")) == []
    assert not (jobs.root.parent / "outside").exists()


def test_submit_body_not_json_or_too_big(jobs: Layout, client: TestClient) -> None:
    r = client.post(
        "/api/submit", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "not JSON" in r.json()["error"]
    r = client.post("/api/submit", json={"body": "x" * (3 << 20)})
    assert r.status_code == 413
    assert list(jobs.inbox.rglob("*")) == []


def test_static_files_and_unknown_ones(jobs: Layout, client: TestClient) -> None:
    r = client.get("/static/app.js")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/javascript")
    again = client.get("/static/app.js", headers={"if-none-match": r.headers["etag"]})
    assert again.status_code == 304
    assert client.get("/static/../pyproject.toml").status_code == 404
    assert client.get("/static/nope.js").status_code == 404


def test_retry_puts_the_prompt_back_as_a_new_job(jobs: Layout, client: TestClient) -> None:
    (jobs.run_dir("job-c") / "prompt.md").write_text('+++\nagent = "bash"\n+++\nexit 3\n')
    r = client.post("/api/jobs/job-c/retry")
    assert r.status_code == 201, r.text
    path = Path(r.json()["path"])
    assert path.parent == jobs.inbox and path.name.endswith(".prompt.md")
    assert 'retry_of = "job-c"' in path.read_text()


def test_retry_of_a_job_whose_env_was_withheld_is_refused(jobs: Layout, client: TestClient) -> None:
    """The dashboard cannot give values back: it says which, and how (issue 27)."""
    text = redact('+++\nagent = "bash"\nenv = { API_TOKEN = "tok-123456789" }\n+++\nexit 3\n')
    (jobs.run_dir("job-c") / "prompt.md").write_text(text)
    r = client.post("/api/jobs/job-c/retry")
    assert r.status_code == 422
    assert "env values API_TOKEN were withheld when it ended" in r.json()["error"]
    assert "hopper retry job-c --env API_TOKEN" in r.json()["error"]
    assert list(jobs.inbox.rglob("*.prompt.md")) == []


def test_retry_refusals(jobs: Layout, client: TestClient) -> None:
    r = client.post("/api/jobs/job-b/retry")
    assert r.status_code == 409
    assert "only a finished job can be retried" in r.json()["error"]
    r = client.post("/api/jobs/job-a/retry")  # finished, but its prompt is gone
    assert r.status_code == 422
    assert "no prompt left" in r.json()["error"]
    assert list(jobs.inbox.rglob("*.prompt.md")) == []


def test_since_counts_recent_finishes(layout: Layout, client: TestClient) -> None:
    recent = datetime.now(UTC) - timedelta(minutes=5)
    make_job(layout, "job-new", created=recent)
    make_job(layout, "job-old")
    assert [j["id"] for j in client.get("/api/jobs?since=1h").json()] == ["job-new"]


# --- the list, a page at a time -------------------------------------------------------


def test_a_page_is_newest_first_with_counts_over_every_job(
    jobs: Layout, client: TestClient
) -> None:
    body = client.get("/api/page?size=2").json()
    assert [j["id"] for j in body["jobs"]] == ["job-d", "job-c"]
    assert body["next"] == "job-c" and body["total"] == 4
    assert body["counts"] == {"queued": 1, "running": 1, "succeeded": 1, "failed": 1, "aborted": 0}
    on_disk = json.loads((jobs.run_dir("job-c") / "job.json").read_text())
    assert body["jobs"][1] == on_disk
    rest = client.get("/api/page?size=2&before=job-c").json()
    assert [j["id"] for j in rest["jobs"]] == ["job-b", "job-a"] and rest["next"] is None


@pytest.mark.parametrize(
    ("query", "ids", "total"),
    [
        ("state=failed", ["job-c"], 1),
        ("q=NIGHTLY", ["job-c", "job-b"], 2),  # a piece of the name, any letter case
        ("q=job-a", ["job-a"], 1),  # or of the id
        ("name=nightly-*&state=running", ["job-b"], 1),
        ("reason=exit_nonzero", ["job-c"], 1),
        ("agent=codex,claude", ["job-d", "job-a"], 2),
    ],
)
def test_page_filters_and_search(
    jobs: Layout, client: TestClient, query: str, ids: list[str], total: int
) -> None:
    body = client.get(f"/api/page?{query}").json()
    assert [j["id"] for j in body["jobs"]] == ids
    assert body["total"] == total


def test_page_counts_follow_the_other_filters(jobs: Layout, client: TestClient) -> None:
    """Clicking a badge adds its state to the filters: its count is that list's length."""
    body = client.get("/api/page?q=nightly&state=failed").json()
    assert body["counts"]["running"] == 1 and body["counts"]["failed"] == 1
    assert body["counts"]["succeeded"] == 0  # job-a is not nightly
    assert body["total"] == len(body["jobs"]) == 1


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("size=0", "size:"),
        ("size=501", "size:"),
        ("size=x", "size:"),
        ("before=../x", "before:"),
        ("reason=bored", "reason: 'bored' is not a reason"),
        ("q=" + "x" * 201, "q: a search of at most 200"),
    ],
)
def test_bad_page_requests_are_400(
    jobs: Layout, client: TestClient, query: str, reason: str
) -> None:
    r = client.get(f"/api/page?{query}")
    assert r.status_code == 400
    assert reason in r.json()["error"]


def test_log_download_and_byte_ranges(jobs: Layout, client: TestClient) -> None:
    text = b"".join(b"line %d of the log\n" % i for i in range(1000))
    (jobs.run_dir("job-b") / "job.log").write_bytes(text)
    r = client.get("/api/jobs/job-b/log?download=1")
    assert r.content == text
    assert r.headers["content-disposition"] == 'attachment; filename="job-b.log"'
    assert r.headers["accept-ranges"] == "bytes"
    r = client.get("/api/jobs/job-b/log", headers={"range": "bytes=5-7"})
    assert (r.status_code, r.content) == (206, text[5:8])
    assert r.headers["content-range"] == f"bytes 5-7/{len(text)}"
    assert "content-encoding" not in r.headers  # a range is the file's own bytes
    r = client.get("/api/jobs/job-b/log", headers={"range": "bytes=-4"})
    assert (r.status_code, r.content) == (206, text[-4:])
    r = client.get("/api/jobs/job-b/log", headers={"range": "bytes=5-"})
    assert r.content == text[5:]
    for bad in ("bytes=99999-", "bytes=-0", "lines=1-2", "bytes=1-2,4-5", "bytes=7-5"):
        r = client.get("/api/jobs/job-b/log", headers={"range": bad})
        assert r.status_code == 416, bad
        assert r.headers["content-range"] == f"bytes */{len(text)}"
