"""``hopper submit --to``, ``pause`` and ``resume`` never write through a linked inbox
folder (issue 27).

A job can swap ``inbox/team`` for a link to a folder elsewhere. The watcher does not
follow it, so a prompt written there would carry its ``env`` secrets out of the root
and never run; a PAUSE there would report success and hold nothing. Each command
walks from the root one ``O_NOFOLLOW`` folder at a time and refuses, exit 1, naming
the link and what to do; the link's target is left as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hopper.store.layout import Layout

PROMPT = "+++\nagent = 'bash'\n[env]\nAPI_KEY = 'sk-secret'\n+++\necho hi\n"


@pytest.fixture
def linked_team(layout: Layout, tmp_path: Path) -> Path:
    """``inbox/team`` is a link to an empty folder outside the root; that folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (layout.inbox / "team").symlink_to(outside)
    return outside


def prompt_file(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.prompt.md"
    path.write_text(PROMPT)
    return path


def assert_refused(result, link: Path, target: Path) -> None:
    assert result.returncode == 1, result.stdout
    assert f"{link}: is a symbolic link (to {target}), not a folder" in result.stderr
    assert f"remove it (rm {link})" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("to", ["team", "team/sub"])
def test_submit_into_a_linked_inbox_folder_is_refused(
    layout: Layout, hopper, tmp_path: Path, linked_team: Path, to: str
) -> None:
    result = hopper("submit", "--to", to, str(prompt_file(tmp_path)))
    assert_refused(result, layout.inbox / "team", linked_team)
    assert os.listdir(linked_team) == []  # no prompt, no secret, no temporary


def test_submit_into_a_linked_inbox_is_refused(layout: Layout, hopper, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    layout.inbox.rmdir()
    layout.inbox.symlink_to(outside)
    result = hopper("submit", str(prompt_file(tmp_path)))
    assert_refused(result, layout.inbox, outside)
    assert os.listdir(outside) == []


def test_submit_through_a_file_where_a_folder_belongs_is_refused(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    (layout.inbox / "team").write_text("not a folder\n")
    result = hopper("submit", "--to", "team/sub", str(prompt_file(tmp_path)))
    assert result.returncode == 1
    assert f"{layout.inbox / 'team'}: is a file, not a folder" in result.stderr
    assert (layout.inbox / "team").read_text() == "not a folder\n"


def test_submit_into_a_real_folder_still_works(layout: Layout, hopper, tmp_path: Path) -> None:
    result = hopper("submit", "--json", "--to", "team/sub", str(prompt_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    path = Path(json.loads(result.stdout)["path"])
    assert path == layout.inbox / "team" / "sub" / "deploy.prompt.md"
    assert path.read_text() == PROMPT


def test_pause_of_a_linked_group_is_refused(layout: Layout, hopper, linked_team: Path) -> None:
    result = hopper("pause", "team")
    assert_refused(result, layout.inbox / "team", linked_team)
    assert os.listdir(linked_team) == []


def test_resume_of_a_linked_group_removes_nothing_elsewhere(
    layout: Layout, hopper, linked_team: Path
) -> None:
    (linked_team / "PAUSE").write_text("someone else's marker\n")
    result = hopper("resume", "team")
    assert_refused(result, layout.inbox / "team", linked_team)
    assert (linked_team / "PAUSE").read_text() == "someone else's marker\n"


def test_pause_marker_planted_as_a_link_is_never_followed(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    """A link at PAUSE itself already pauses (the watcher uses lexists); pause creates
    nothing through it, resume removes the link, never its target."""
    target = tmp_path / "elsewhere" / "file"
    target.parent.mkdir()
    (layout.inbox / "team").mkdir()
    (layout.inbox / "team" / "PAUSE").symlink_to(target)
    assert hopper("pause", "team").returncode == 0
    assert not target.exists()
    target.write_text("keep\n")
    assert hopper("resume", "team").returncode == 0
    assert not os.path.lexists(layout.inbox / "team" / "PAUSE")
    assert target.read_text() == "keep\n"


def test_pause_and_resume_of_a_real_group(layout: Layout, hopper) -> None:
    assert hopper("pause", "team").returncode == 0
    assert (layout.inbox / "team" / "PAUSE").is_file()
    out = hopper("resume", "team")
    assert out.returncode == 0 and "it was not paused" not in out.stdout
    assert not (layout.inbox / "team" / "PAUSE").exists()
    out = hopper("resume", "other")  # no folder at all: nothing to remove, nothing made
    assert out.returncode == 0 and "it was not paused" in out.stdout
    assert not (layout.inbox / "other").exists()
