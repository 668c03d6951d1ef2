"""A prompt is admitted once, at claim: start runs what was admitted, never prompt.md again.

Each test stops a watcher right after it queued a job (the crash point
``claim.after_record``), changes the run directory the way a user, a job or
an upgrade could, and lets the next watcher start the job.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from conftest import drop
from hopper.core.admission import StartSpec
from hopper.core.prompt import parse
from hopper.store.admission import (
    ADMISSION_FILE,
    AdmissionUnusable,
    read_admission,
    write_admission,
)
from hopper.store.layout import Layout

Hopper = Callable[..., CompletedProcess[str]]


def queued_then_stopped(layout: Layout, hopper: Hopper, text: str) -> Path:
    """Drop ``text``, let a watcher queue it and die there; the run directory."""
    drop(layout, "job", text)
    crashed = hopper("run", "--until-idle", env={"HOPPER_CRASH_AT": "claim.after_record"})
    assert crashed.returncode != 0
    (run_dir,) = layout.runs.iterdir()
    assert json.loads((run_dir / "job.json").read_text())["state"] == "queued"
    return run_dir


def finished(run_dir: Path) -> dict[str, object]:
    record: dict[str, object] = json.loads((run_dir / "job.json").read_text())
    return record


def script(out: Path, word: str) -> str:
    return f'+++\nagent = "bash"\nenv = {{ WORD = "{word}" }}\n+++\necho "{word} $WORD" > {out}\n'


def test_editing_prompt_md_after_the_claim_does_not_change_what_runs(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_dir = queued_then_stopped(layout, hopper, script(out, "admitted"))
    assert stat.S_IMODE((run_dir / ADMISSION_FILE).stat().st_mode) == 0o600
    (run_dir / "prompt.md").write_text(script(out, "edited"))
    assert hopper("run", "--until-idle").returncode == 0
    assert out.read_text() == "admitted admitted\n"  # the admitted script and env
    assert finished(run_dir)["state"] == "succeeded"


def test_a_prompt_that_parsed_at_claim_cannot_become_bad_prompt_at_start(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_dir = queued_then_stopped(layout, hopper, script(out, "fine"))
    (run_dir / "prompt.md").write_text("+++\nagent = \n")  # no longer parses
    assert hopper("run", "--until-idle").returncode == 0
    record = finished(run_dir)
    assert (record["state"], record["reason"]) == ("succeeded", "completed"), record["detail"]
    assert out.read_text() == "fine fine\n"


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("remove", "is missing (deleted after the claim"),
        ("other-job", "is not the one hopper wrote at claim (it is job someone-else's, not "),
        ("garbage", "is not the one hopper wrote at claim ("),
    ],
)
def test_a_job_without_a_usable_admission_record_is_lost_and_its_prompt_md_never_runs(
    layout: Layout, hopper: Hopper, tmp_path: Path, damage: str, why: str
) -> None:
    """admission.json is the job: without it the job is filed lost, saying which file
    and what happened; prompt.md (edited here) is never parsed in its place."""
    out = tmp_path / "out"
    run_dir = queued_then_stopped(layout, hopper, script(out, "old"))
    (run_dir / "prompt.md").write_text(script(out, "edited"))
    path = run_dir / ADMISSION_FILE
    if damage == "remove":
        path.unlink()
    elif damage == "other-job":
        start = StartSpec.of("someone-else", parse(script(out, "other").encode()))
        path.unlink()
        write_admission(run_dir, start)
    else:
        path.write_text("{not json")
    result = hopper("run", "--until-idle")
    assert result.returncode == 0
    record = finished(run_dir)
    assert (record["state"], record["reason"]) == ("failed", "lost")
    detail = str(record["detail"])
    assert f"runs/{run_dir.name}/admission.json, the job as admitted at claim, {why}" in detail
    assert "hopper never runs prompt.md in its place" in detail
    assert not out.exists()  # neither the admitted script nor the edited one ran


def test_read_admission(tmp_path: Path) -> None:
    start = StartSpec.of("j1", parse(b'+++\nenv = { K = "v" }\n+++\ntask\n'))
    assert read_admission(tmp_path, "j1", 1 << 20) is None
    write_admission(tmp_path, start)
    assert read_admission(tmp_path, "j1", 1 << 20) == start
    assert stat.S_IMODE((tmp_path / ADMISSION_FILE).stat().st_mode) == 0o600
    with pytest.raises(AdmissionUnusable, match="it is job j1's, not j2's"):
        read_admission(tmp_path, "j2", 1 << 20)
    elsewhere = tmp_path / "elsewhere.json"
    os.replace(tmp_path / ADMISSION_FILE, elsewhere)
    (tmp_path / ADMISSION_FILE).symlink_to(elsewhere)
    with pytest.raises(AdmissionUnusable):
        read_admission(tmp_path, "j1", 1 << 20)  # a link is never followed
    write_admission(tmp_path, start)  # replaces the link, never writes through it
    assert not (tmp_path / ADMISSION_FILE).is_symlink()
    assert read_admission(tmp_path, "j1", 1 << 20) == start


def test_the_first_admission_is_made_in_place_and_a_failed_write_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's admission.json is made exclusively at its name (no temporary, no
    rename); one already there (recovery completing a claim) is replaced atomically;
    a write that fails (a full disk) removes the file it made and raises."""
    from hopper.store import admission, atomic

    first = StartSpec.of("j1", parse(b"+++\n+++\nfirst\n"))
    second = StartSpec.of("j1", parse(b"+++\n+++\nsecond\n"))
    renamed: list[str] = []
    real_replace = atomic.os.replace

    def replace(src: str, dst: str, **kw: int) -> None:
        renamed.append(dst)
        real_replace(src, dst, **kw)

    monkeypatch.setattr(atomic.os, "replace", replace)
    write_admission(tmp_path, first)
    assert renamed == [] and read_admission(tmp_path, "j1", 1 << 20) == first
    write_admission(tmp_path, second)
    assert renamed == [ADMISSION_FILE] and read_admission(tmp_path, "j1", 1 << 20) == second

    full = tmp_path / "full"
    full.mkdir()

    def no_space(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(admission.os, "write", no_space)
    with pytest.raises(OSError, match="No space"):
        write_admission(full, first)
    assert list(full.iterdir()) == []
