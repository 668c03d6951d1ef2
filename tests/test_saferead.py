"""The safe reader and the readers built on it: no link followed, no hang, no balloon.

Each hostile file is one a job can plant in its own run directory (its
default working directory) or, through ``../<id>/``, in another job's.
Reads that could block or allocate without bound run in a child process with
a deadline and an address-space limit, so a regression fails the test
instead of hanging or exhausting the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hopper.agents.summary import read_agent_summary, record_fields
from hopper.errors import JobFileCorrupt
from hopper.store import saferead
from hopper.store.claim import read_claim
from hopper.store.jobfile import read_exit, read_record, read_resources
from hopper.store.markers import take_priority_request
from hopper.store.saferead import UnreadableFile

FOUR_GIB = 4 << 30
NOW = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


def sparse(path: Path, size: int = FOUR_GIB) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def isolated(code: str, *, memory: int = 1 << 30, timeout: float = 20) -> str:
    """Run ``code`` in a child with at most ``memory`` bytes of address space; its stdout."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# -- the reader itself ---------------------------------------------------------------


def test_reads_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    assert saferead.read_bytes(path, 5) == b"hello"


def test_reads_relative_to_a_directory_fd(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert saferead.read_bytes(Path("f"), 10, dir_fd=fd) == b"x"
    finally:
        os.close(fd)


def test_missing_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        saferead.read_bytes(tmp_path / "nope", 10)


def test_over_the_limit_is_refused_by_size(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"123456")
    with pytest.raises(UnreadableFile) as err:
        saferead.read_bytes(path, 5)
    assert err.value.problem == "too_big"
    assert "is 6 bytes, over the limit of 5 bytes" in str(err.value)
    assert str(path) in str(err.value)


def test_truncate_reads_only_the_head(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"123456")
    assert saferead.read_bytes(path, 4, truncate=True) == b"1234"


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: os.mkfifo(p), "a FIFO"),
        (lambda p: p.symlink_to("/etc/passwd"), "a symbolic link"),
        (lambda p: p.mkdir(), "a directory"),
    ],
    ids=["fifo", "symlink", "directory"],
)
def test_not_a_regular_file_is_refused(tmp_path: Path, make, kind: str) -> None:
    path = tmp_path / "f"
    make(path)
    with pytest.raises(UnreadableFile) as err:
        saferead.read_bytes(path, 100)
    assert err.value.problem == "not_regular"
    assert f"is {kind}, not a regular file" in str(err.value)
    assert "plain file" in err.value.hint


def test_a_fifo_swapped_in_after_the_check_does_not_block(tmp_path: Path) -> None:
    """O_NONBLOCK + fstat: even past the lstat check, a FIFO cannot hang the reader."""
    path = tmp_path / "f"
    os.mkfifo(path)
    out = isolated(
        f"""
        import os
        from pathlib import Path
        from hopper.store import saferead
        real = os.stat
        os.stat = lambda p, **kw: real("/etc/hostname", **kw)  # the check sees a plain file
        try:
            saferead.read_bytes(Path({str(path)!r}), 100)
        except saferead.UnreadableFile as exc:
            print(exc.problem, exc.message)
        """
    )
    assert out.startswith("not_regular changed into something other than a regular file")


def test_bad_utf8_and_bad_json_and_deep_json_are_reasons(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(UnreadableFile, match="not valid UTF-8"):
        saferead.read_text(path, 100)
    path.write_bytes(b"{not json")
    with pytest.raises(UnreadableFile, match="not valid JSON"):
        saferead.read_json(path, 100)
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(UnreadableFile, match="not valid JSON"):
        saferead.read_json(path, 1 << 20)


def test_a_4gib_sparse_file_costs_no_memory(tmp_path: Path) -> None:
    path = sparse(tmp_path / "huge")
    out = isolated(
        f"""
        from pathlib import Path
        from hopper.store import saferead
        try:
            saferead.read_bytes(Path({str(path)!r}), 1 << 20)
        except saferead.UnreadableFile as exc:
            print(exc.problem)
        print(len(saferead.read_bytes(Path({str(path)!r}), 4096, truncate=True)))
        """,
        memory=1 << 30,
    )
    assert out.split() == ["too_big", "4096"]


# -- markers: PRIORITY -----------------------------------------------------------------


def test_priority_fifo_is_rejected_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "PRIORITY")
    out = isolated(
        f"""
        from pathlib import Path
        from hopper.store.markers import take_priority_request
        print(take_priority_request(Path({str(tmp_path)!r})))
        """
    )
    assert "PRIORITY is a FIFO, not a regular file" in out
    assert not os.path.lexists(tmp_path / "PRIORITY")
    assert not os.path.lexists(tmp_path / ".PRIORITY.taken")


def test_priority_4gib_sparse_is_rejected_in_little_memory(tmp_path: Path) -> None:
    sparse(tmp_path / "PRIORITY")
    out = isolated(
        f"""
        from pathlib import Path
        from hopper.store.markers import take_priority_request
        print(take_priority_request(Path({str(tmp_path)!r})))
        """,
        memory=1 << 30,  # the old reader needed > 4 GiB here (14 GB RSS in the issue)
    )
    assert "over the limit of 64 bytes" in out
    assert not os.path.lexists(tmp_path / ".PRIORITY.taken")


def test_priority_directory_is_rejected_and_removed(tmp_path: Path) -> None:
    (tmp_path / "PRIORITY").mkdir()
    assert "is a directory" in str(take_priority_request(tmp_path))
    assert not os.path.lexists(tmp_path / ".PRIORITY.taken")


def test_priority_still_reads_a_good_request(tmp_path: Path) -> None:
    (tmp_path / "PRIORITY").write_text("7\n")
    assert take_priority_request(tmp_path) == 7


# -- run directory files -----------------------------------------------------------------


def test_job_json_fifo_is_corrupt_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job.json")
    with pytest.raises(JobFileCorrupt, match="is a FIFO"):
        read_record(tmp_path)


def test_job_json_invalid_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"id": 5}')
    with pytest.raises(JobFileCorrupt, match="not a valid job record: id"):
        read_record(tmp_path)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"garbage", "Invalid JSON"),
        (b'{"exit_code": 0}', "not a valid exit record: started"),
        (b'{"started": [], "finished_at": "soon"}', "not a valid exit record: started"),
        (b"[" * 50_000 + b"]" * 50_000, "not a valid exit record"),
    ],
    ids=["not-json", "missing-fields", "wrong-types", "deep"],
)
def test_bogus_exit_json_is_a_clear_corrupt_error(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    (tmp_path / "exit.json").write_bytes(content)
    with pytest.raises(JobFileCorrupt) as err:
        read_exit(tmp_path)
    assert fragment in str(err.value)
    assert "exit.json" in str(err.value)
    assert "supervisor" in err.value.hint


def test_exit_json_fifo_is_corrupt(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "exit.json")
    with pytest.raises(JobFileCorrupt, match="FIFO"):
        read_exit(tmp_path)


def test_resources_and_claim_fifos_read_as_absent(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "resources.json")
    os.mkfifo(tmp_path / "claim.json")
    assert read_resources(tmp_path) is None
    assert read_claim(tmp_path) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.symlink_to(p.with_name("real.json")),
        lambda p: p.mkdir(),
        lambda p: sparse(p, saferead.SMALL_LIMIT + 1),
        lambda p: p.write_bytes(b'{"cpu_seconds": "lots"}'),
        lambda p: p.write_bytes(b'{"cpu_seconds": 1.5'),  # torn
    ],
    ids=["link", "dir", "huge", "invalid", "torn"],
)
def test_resources_a_job_planted_read_as_absent(tmp_path: Path, make: Any) -> None:
    """resources.json is in the job's own run directory and read at each heartbeat
    (saferead.read_fast): never through a link, never past the cap, never a guess."""
    (tmp_path / "real.json").write_text('{"cpu_seconds": 9.0}')
    make(tmp_path / "resources.json")
    assert read_resources(tmp_path) is None
    planted = tmp_path / "resources.json"
    planted.rmdir() if planted.is_dir() and not planted.is_symlink() else planted.unlink()
    planted.write_text('{"cpu_seconds": 2.5, "processes": 3}')  # the supervisor's
    figures = read_resources(tmp_path)
    assert figures is not None and (figures.cpu_seconds, figures.processes) == (2.5, 3)


def test_read_fast_keeps_the_limit_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "resources.json"
    path.write_bytes(b"x" * 100)
    assert saferead.read_fast(str(path), 100)[0] == b"x" * 100
    with pytest.raises(UnreadableFile, match="over the limit of 99 bytes"):
        saferead.read_fast(str(path), 99)


def test_claim_json_keeps_only_string_fields(tmp_path: Path) -> None:
    (tmp_path / "claim.json").write_text(json.dumps({"owner": ["x"], "inbox_path": "inbox/a"}))
    assert read_claim(tmp_path) == {"inbox_path": "inbox/a"}


# -- agent.json ----------------------------------------------------------------------------


def events(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "content",
    [
        b'{"permission_denials": 5}',
        b'{"usage": {"input_tokens": "many"}}',
        b'{"turns": -1}',
        b'{"result_path": "../../etc/passwd"}',
        b'{"usage": {"cost_usd": NaN}}',
        b"[1, 2]",
        b"\xff\xfe",
    ],
    ids=["denials-int", "usage-str", "turns-neg", "result-escape", "cost-nan", "list", "bytes"],
)
def test_bad_agent_summary_is_ignored_with_an_event(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "agent.json").write_bytes(content)
    assert read_agent_summary(tmp_path, NOW) is None
    [event] = events(tmp_path)
    assert event["event"] == "agent_summary_ignored"
    assert event["detail"]


def test_agent_summary_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "agent.json")
    assert read_agent_summary(tmp_path, NOW) is None
    assert "FIFO" in str(events(tmp_path)[0]["detail"])


def test_good_agent_summary_gives_record_fields(tmp_path: Path) -> None:
    summary = {
        "outcome": "succeeded",
        "detail": "ok",
        "session_id": "s-1",
        "turns": 3,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01, "other": 1},
        "permission_denials": ["Bash(rm)"],
        "nudges": 0,
        "result_path": "result.md",
        "error_kind": None,
    }
    (tmp_path / "agent.json").write_text(json.dumps(summary))
    agent = read_agent_summary(tmp_path, NOW)
    assert agent is not None and agent["outcome"] == "succeeded"
    fields = record_fields(agent)
    assert fields["session_id"] == "s-1"
    assert fields["permission_denials"] == ["Bash(rm)"]
    assert fields["usage"].input_tokens == 10
    assert events(tmp_path) == []


# -- hopper's own bookkeeping under .hopper/ (a job can reach it through $HOPPER_ROOT) ----


def test_planted_fifos_in_bookkeeping_do_not_block(tmp_path: Path) -> None:
    """A slot lease, a watcher heartbeat and a job.json seen by the status index, each a
    FIFO: read as torn / corrupt, in a child with a deadline (the old reads blocked)."""
    out = isolated(
        f"""
        import os
        from pathlib import Path
        from hopper.store.index import JobIndex
        from hopper.store.layout import Layout
        from hopper.store.leases import SlotLeases
        from hopper.store.watchers import read_raw

        layout = Layout(Path({str(tmp_path)!r}) / "root")
        layout.ensure()
        leases = SlotLeases(layout, "h:1:1", "h")
        slots = leases.base / "global"
        slots.mkdir(parents=True)
        os.mkfifo(slots / "0")
        print([lease.job_id for lease in leases.holders("global", 0.0)])
        os.mkfifo(layout.root / "beat.json")
        print(read_raw(layout.root / "beat.json"))
        run = layout.runs / "20261123-090000-000-x-abcd"
        run.mkdir()
        os.mkfifo(run / "job.json")
        with JobIndex.open(layout) as index:
            print(index.refresh().corrupt)
        """
    )
    lease, beat, corrupt = out.splitlines()
    assert lease == "['']", "a lease that cannot be read holds nothing"
    assert beat == "None"
    assert "is a FIFO, not a regular file" in corrupt


def test_logs_of_a_job_whose_job_log_became_a_fifo(layout, hopper) -> None:
    """`hopper logs` opened job.log blocking: a job that swapped it for a FIFO hung the
    command (and any follower). Now it says what is wrong and exits 1."""
    from conftest import bash, drop

    drop(layout, "swapper", bash('rm -f "$HOPPER_RUN_DIR/job.log"; echo hi'))
    assert hopper("run", "--until-idle").returncode == 0
    [run_dir] = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    os.mkfifo(run_dir / "job.log")
    result = hopper("logs", run_dir.name, timeout=20)
    assert result.returncode == 1, result
    assert "job.log: is a FIFO, not a regular file" in result.stderr
    assert "Traceback" not in result.stderr
