"""The dashboard's submit, pause and retry never read or write through a link out of
the root (issue 27): each is refused with a 4xx JSON reason naming the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hopper.core.states import JobState
from hopper.store.layout import Layout
from web.webtools import make_job

SECRET = b"+++\nagent = 'bash'\n+++\necho the operator's private key\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def test_submit_into_a_linked_folder_is_409(
    layout: Layout, client: TestClient, outside: Path
) -> None:
    (layout.inbox / "team").symlink_to(outside)
    r = client.post(
        "/api/submit", json={"body": "echo x", "agent": "bash", "to": "team", "env": {"K": "v"}}
    )
    assert r.status_code == 409, r.text
    reason = r.json()["error"]
    assert f"{layout.inbox / 'team'}: is a symbolic link (to {outside})" in reason
    assert f"rm {layout.inbox / 'team'}" in reason
    assert os.listdir(outside) == []


@pytest.mark.parametrize("path", ["/api/pause", "/api/resume"])
def test_pause_or_resume_of_a_linked_group_is_409(
    layout: Layout, client: TestClient, outside: Path, path: str
) -> None:
    (layout.inbox / "team").symlink_to(outside)
    if path == "/api/resume":
        (outside / "PAUSE").write_text("theirs\n")
    before = sorted(os.listdir(outside))
    r = client.post(path, json={"group": "team"})
    assert r.status_code == 409, r.text
    assert "is a symbolic link" in r.json()["error"]
    assert sorted(os.listdir(outside)) == before
    if path == "/api/resume":
        assert (outside / "PAUSE").read_text() == "theirs\n"


@pytest.mark.parametrize(
    "processed_path",
    ["{secret}", "processed/../../private/key.prompt.md"],
    ids=["absolute", "dotdot"],
)
def test_retry_of_a_tampered_record_is_422(
    layout: Layout, client: TestClient, tmp_path: Path, processed_path: str
) -> None:
    secret = tmp_path / "private" / "key.prompt.md"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    make_job(layout, "job-x", JobState.FAILED, processed_path=processed_path.format(secret=secret))
    r = client.post("/api/jobs/job-x/retry")
    assert r.status_code == 422, r.text
    reason = r.json()["error"]
    assert "job job-x's processed_path" in reason and "does not lie under processed/" in reason
    assert list(layout.inbox.rglob("*")) == []
    assert secret.read_bytes() == SECRET


def test_retry_into_a_linked_inbox_folder_is_409(
    layout: Layout, client: TestClient, outside: Path
) -> None:
    make_job(
        layout, "job-y", JobState.FAILED, group="team", processed_path="processed/team/y.prompt.md"
    )
    (layout.processed / "team").mkdir()
    (layout.processed / "team" / "y.prompt.md").write_text("echo again\n")
    (layout.inbox / "team").symlink_to(outside)
    r = client.post("/api/jobs/job-y/retry")
    assert r.status_code == 409, r.text
    assert "is a symbolic link" in r.json()["error"]
    assert os.listdir(outside) == []
