"""Hostile input, end to end through a real watcher: bad files never stop the watcher.

Contract (docs/contract.md, invariant 7): a malformed prompt, an unknown agent,
a symlink, a FIFO, a huge or binary file, a path that escapes the root — each
ends as a failed job (``bad_prompt`` / ``unknown_agent``) whose ``detail``
names the inbox file and says what to do, or is skipped (dot-names, too deep);
nothing outside the root is touched; and the good prompt next to it runs.

Most cases are batched: every case is laid out in one inbox, one
``hopper run --until-idle`` serves them all, and one parametrized test per
case checks its outcome. Cases that are about timing (a file deleted before
the claim, a file still being written, inotify hints from too deep) use a
background watcher.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, Watchers, bash, beat_advanced, drop, hopper_cmd, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.intake import printable
from hopper.store.inbox import MAX_DEPTH
from hopper.store.jobfile import LOG_FILE, read_record
from hopper.store.layout import Layout

SECRET = "TOP-SECRET-CONTENT-OUTSIDE-THE-ROOT"
OK = "ok"  # expectation: the job runs and succeeds
BAD = Reason.BAD_PROMPT
UNKNOWN = Reason.UNKNOWN_AGENT
IGNORED = "ignored"  # expectation: never claimed, left where it is


@dataclass
class Env:
    layout: Layout
    outside: Path  # a directory outside the root, with a secret file in it

    @property
    def secret(self) -> Path:
        return self.outside / "secret.prompt.md"


@dataclass
class Case:
    id: str
    setup: Callable[[Env], Path]  # lays the case out; returns the inbox path it made
    expect: str | Reason
    hints: tuple[str, ...] = ()  # fragments the detail must contain (what is wrong / what to do)
    check: Callable[[Batch, Path, JobRecord | None], None] | None = None


def text(name: str, content: str | bytes, sub: str = "") -> Callable[[Env], Path]:
    return lambda env: drop(env.layout, name, content, sub=sub)


def make_inbox_entry(name: str, make: Callable[[Path, Env], None]) -> Callable[[Env], Path]:
    def setup(env: Env) -> Path:
        path = env.layout.inbox / name
        make(path, env)
        return path

    return setup


def symlink_to(target: Callable[[Env], str]) -> Callable[[Path, Env], None]:
    return lambda path, env: path.symlink_to(target(env))


def fifo(path: Path, env: Env) -> None:
    os.mkfifo(path)


def unix_socket(path: Path, env: Env) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    os.chdir(path.parent)  # sun_path is short (108 bytes): bind by a relative name
    try:
        sock.bind(path.name)
    finally:
        os.chdir(cwd)
        sock.close()  # the socket file stays


def char_device(path: Path, env: Env) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null


def sparse(path: Path, env: Env) -> None:
    with open(path, "wb") as f:
        f.truncate(100 * 1024 * 1024)


def unreadable(path: Path, env: Env) -> None:
    path.write_text(bash("echo unreadable-ran"))
    path.chmod(0)


def dir_prompt(path: Path, env: Env) -> None:
    path.mkdir()
    drop(env.layout, "inner", bash("echo inner"), sub=path.name)


def _target_untouched(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    assert batch.env.secret.read_text() == SECRET
    assert not batch.env.secret.is_symlink()
    assert record is not None and record.processed_path
    filed = batch.env.layout.root / record.processed_path
    assert filed.is_symlink(), "the link itself was filed, not its target"


def _inner_ran(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    env = batch.env
    inner = env.layout.inbox / "folder.prompt.md" / "inner.prompt.md"
    rec = batch.records["inbox/folder.prompt.md/inner.prompt.md"]
    assert (rec.state, rec.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert not inner.exists()
    assert rec.processed_path is not None
    assert rec.processed_path.startswith("processed/folder.prompt.md/inner.")
    assert (env.layout.inbox / "folder.prompt.md").is_dir(), "the folder itself stays"


def _not_descended(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    assert (batch.env.outside / "sub" / "trap.prompt.md").read_text() == bash("echo trap")


def _agent_stays_bash(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    assert record is not None and record.agent == "bash"
    assert record.state is JobState.SUCCEEDED
    log = (batch.env.layout.root / "runs" / record.id / LOG_FILE).read_text()
    assert log == "injected-safe\n"


def _unreadable(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    # Tests usually run as root, which reads a mode-000 file anyway: then it runs.
    assert record is not None
    if record.state is JobState.SUCCEEDED:
        return
    assert record.reason is Reason.BAD_PROMPT
    assert record.detail and "permission denied" in record.detail


NON_UTF8 = os.fsdecode(b"caf\xe9-\xff.prompt.md")  # Latin-1 bytes: not a UTF-8 name


def _after(n: int) -> str:
    return "after = [" + ", ".join(f'"job-{i}"' for i in range(n)) + "]"


def _rendered_safely(batch: Batch, inbox: Path, record: JobRecord | None) -> None:
    assert record is not None
    assert record.inbox_path == "inbox/caf\\xe9-\\xff.prompt.md"
    assert record.name == "caf\\xe9-\\xff"
    assert record.processed_path is not None
    assert (batch.env.layout.root / record.processed_path).read_text() == bash("echo latin1")


def deep_setup(env: Env) -> Path:
    sub = "/".join(f"d{i}" for i in range(20))
    return drop(env.layout, "deep", bash("echo deep"), sub=sub)


CASES: list[Case] = [
    # -- not regular files: claimed (the entry itself), never followed or opened
    Case(
        "symlink-outside-file",
        make_inbox_entry("link.prompt.md", symlink_to(lambda e: str(e.secret))),
        BAD,
        ("symbolic link", "plain file"),
        check=_target_untouched,
    ),
    Case(
        "symlink-relative-escape",
        make_inbox_entry(
            "rel.prompt.md",
            symlink_to(lambda e: os.path.relpath(e.secret, e.layout.inbox)),
        ),
        BAD,
        ("symbolic link",),
        check=_target_untouched,
    ),
    Case(
        "symlink-dev-zero",
        make_inbox_entry("zero.prompt.md", symlink_to(lambda e: "/dev/zero")),
        BAD,
        ("symbolic link",),
    ),
    Case(
        "symlink-dangling",
        make_inbox_entry("dangling.prompt.md", symlink_to(lambda e: "/nonexistent/x")),
        BAD,
        ("symbolic link",),
    ),
    Case(
        "symlink-to-dir-outside",
        make_inbox_entry("linkdir.prompt.md", symlink_to(lambda e: str(e.outside / "sub"))),
        BAD,
        ("symbolic link",),
        check=_not_descended,
    ),
    Case("fifo", make_inbox_entry("pipe.prompt.md", fifo), BAD, ("FIFO", "plain file")),
    Case("unix-socket", make_inbox_entry("sock.prompt.md", unix_socket), BAD, ("socket",)),
    Case("char-device", make_inbox_entry("null.prompt.md", char_device), BAD, ("device file",)),
    Case(
        "dir-named-prompt",
        make_inbox_entry("folder.prompt.md", dir_prompt),
        IGNORED,
        check=_inner_ran,
    ),
    # -- size and encoding
    Case(
        "sparse-100mb",
        make_inbox_entry("huge.prompt.md", sparse),
        BAD,
        ("104857600 bytes", "max_prompt_bytes"),
    ),
    Case("binary-png", text("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"), BAD, ("NUL",)),
    Case(
        "invalid-utf8",
        text("latin1", b'+++\nagent = "bash"\n+++\necho caf\xe9\n'),
        BAD,
        (":4:", "UTF-8"),
    ),
    Case("nul-byte", text("nul", b"echo a\x00b\n"), BAD, ("NUL",)),
    Case("utf8-bom", text("bom", b"\xef\xbb\xbf" + bash("echo bom").encode()), OK),
    Case("crlf", text("crlf", bash("echo crlf").replace("\n", "\r\n")), OK),
    Case("empty-file", text("empty", b""), BAD, ("is empty",)),
    Case("whitespace-only", text("blank", b"  \n\t\n  \n"), BAD, ("is empty",)),
    # -- names
    Case("name-with-spaces", text("fix the tests", bash("echo spaces")), OK),
    Case("name-with-newline", text("new\nline", bash("echo newline")), OK),
    Case("unicode-name", text("ünïcödé 日本語 🚀", bash("echo unicode")), OK),
    Case("very-long-name", text("L" * 240, bash("echo long")), OK),  # 250-byte file name
    Case(
        "non-utf8-name",
        make_inbox_entry(NON_UTF8, lambda p, e: p.write_text(bash("echo latin1"))),
        BAD,
        ("not valid UTF-8", "rename it to UTF-8"),
        check=_rendered_safely,
    ),
    Case("name-just-suffix", text("", bash("echo suffix")), IGNORED),  # ".prompt.md": a dot-name
    Case(
        "dot-file",
        make_inbox_entry(".x.prompt.md", lambda p, e: p.write_text(bash("echo dot"))),
        IGNORED,
    ),
    Case(
        "tmp-suffix",
        make_inbox_entry("x.prompt.md.tmp", lambda p, e: p.write_text(bash("echo tmp"))),
        IGNORED,
    ),
    Case("too-deep", deep_setup, IGNORED),
    Case(
        "unreadable-mode-000",
        make_inbox_entry("locked.prompt.md", unreadable),
        OK,
        check=_unreadable,
    ),
    # -- workdir
    Case(
        "workdir-relative-escape",
        text("relwd", bash("echo hi", workdir="../../etc")),
        BAD,
        ("relative", "absolute path"),
    ),
    Case(
        "workdir-missing",
        text("nowd", bash("echo hi", workdir="/nonexistent/hopper/wd")),
        BAD,
        ("does not exist", "create it"),
    ),
    Case(
        "workdir-is-a-file",
        text("filewd", bash("echo hi", workdir="/etc/passwd")),
        BAD,
        ("not a directory",),
    ),
    # -- front matter
    Case(
        "front-matter-injection",
        text(
            "inject",
            '+++\nagent = "bash"\n+++\nprose\n+++\nagent = "evil"\n+++\n'
            "```bash\necho injected-safe\n```\n",
        ),
        OK,
        check=_agent_stays_bash,
    ),
    Case(
        "duplicate-keys",
        text("dup", '+++\nagent = "bash"\nagent = "bash"\n+++\necho\n'),
        BAD,
        (":3:", "TOML"),
    ),
    Case(
        "wrong-type-timeout",
        text("wt1", "+++\ntimeout = true\n+++\necho\n"),
        BAD,
        (":2:", "timeout"),
    ),
    Case("wrong-type-agent", text("wt2", "+++\nagent = 3\n+++\necho\n"), BAD, (":2:", "agent")),
    Case("wrong-type-env", text("wt3", '+++\nenv = "x"\n+++\necho\n'), BAD, (":2:", "env")),
    Case(
        "env-non-string-values",
        text("envint", '+++\nagent = "bash"\nenv = { A = 1, B = true }\n+++\necho\n'),
        BAD,
        (":3:", "env"),
    ),
    Case(
        "unknown-key",
        text("unk", '+++\nagent = "bash"\ncolour = "x"\n+++\necho\n'),
        BAD,
        (":3:", "'colour'", "known keys"),
    ),
    Case(
        "yaml-front-matter",
        text("yaml", "---\nagent: bash\n---\necho\n"),
        BAD,
        (":1:", "YAML", "+++"),
    ),
    Case(
        "unclosed-front-matter",
        text("unclosed", '+++\nagent = "bash"\necho\n'),
        BAD,
        (":1:", "+++"),
    ),
    Case(
        "timeout-garbage",
        text("soon", '+++\nagent = "bash"\ntimeout = "soon"\n+++\necho\n'),
        BAD,
        (":3:", "timeout", "45m"),
    ),
    Case(
        "name-with-slash",
        text("slash", '+++\nagent = "bash"\nname = "../../etc/x"\n+++\necho\n'),
        BAD,
        (":3:", "'name'", "letters"),
    ),
    Case("bash-no-script", text("noscript", bash("")), BAD, ("no script",)),
    Case(
        "front-matter-arrays-1000-deep",
        text("deeparr", "+++\nafter = " + "[" * 1000 + "]" * 1000 + "\n+++\necho\n"),
        BAD,
        (":2:", "nested too deeply"),
    ),
    Case(
        "front-matter-tables-1000-deep",
        text("deeptab", "+++\nenv = " + "{ a = " * 1000 + '"x"' + " }" * 1000 + "\n+++\necho\n"),
        BAD,
        (":2:", "nested too deeply"),
    ),
    Case(
        "after-101-names",
        text("after101", bash("echo", after="x").replace('after = "x"', _after(101))),
        BAD,
        (":3:", "'after'", "at most 100"),
    ),
    Case("timeout-nan", text("tnan", "+++\ntimeout = nan\n+++\necho\n"), BAD, (":2:", "finite")),
    Case("timeout-inf", text("tinf", "+++\ntimeout = inf\n+++\necho\n"), BAD, (":2:", "finite")),
    Case("timeout-zero", text("t0", "+++\ntimeout = 0\n+++\necho\n"), BAD, (":2:", "than 0")),
    Case("timeout-neg", text("tneg", "+++\ntimeout = -1\n+++\necho\n"), BAD, (":2:", "negative")),
    # -- agents
    Case(
        "unknown-agent",
        text("agent", '+++\nagent = "nope"\n+++\nhi\n'),
        UNKNOWN,
        ("available: bash",),
    ),
    Case("agent-Claude", text("cl2", '+++\nagent = "Claude"\n+++\nhi\n'), UNKNOWN, ("available",)),
    Case("agent-CLAUDE", text("cl3", '+++\nagent = "CLAUDE"\n+++\nhi\n'), UNKNOWN, ("available",)),
    Case("agent-empty", text("cl4", '+++\nagent = ""\n+++\nhi\n'), BAD, (":2:", "'agent'")),
    # -- good prompts alongside
    Case("good-top", text("good", bash("echo good")), OK),
    Case("good-nested", text("good2", bash("echo good2"), sub="team/a"), OK),
]


@dataclass
class Batch:
    env: Env
    result: subprocess.CompletedProcess[str]
    paths: dict[str, Path]
    skipped: dict[str, str]
    records: dict[str, JobRecord]  # by inbox_path
    outside_before: dict[str, tuple[int, float, str]]
    elapsed: float


def _snapshot(folder: Path) -> dict[str, tuple[int, float, str]]:
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        content = path.read_text() if path.is_file() else ""
        out[str(path)] = (st.st_size, st.st_mtime, content)
    return out


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Batch]:
    base = tmp_path_factory.mktemp("hostile")
    layout = Layout(base / "root")
    layout.ensure()
    outside = base / "outside"
    (outside / "sub").mkdir(parents=True)
    env = Env(layout, outside)
    env.secret.write_text(SECRET)
    (outside / "sub" / "trap.prompt.md").write_text(bash("echo trap"))
    config = base / "config.toml"
    config.write_text(FAST_CONFIG)

    paths: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for case in CASES:
        try:
            paths[case.id] = case.setup(env)
        except PermissionError as exc:  # e.g. mknod without CAP_MKNOD
            skipped[case.id] = f"cannot build this case here: {exc}"
    before = _snapshot(outside)
    started = time.monotonic()
    result = subprocess.run(
        hopper_cmd("run", "--until-idle", "--root", str(layout.root), "--config", str(config)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    records = {}
    for run_dir in layout.runs.iterdir():
        if not run_dir.name.startswith("."):
            rec = read_record(run_dir)
            records[rec.inbox_path] = rec
    yield Batch(env, result, paths, skipped, records, before, elapsed)


def test_watcher_survives_the_whole_corpus(batch: Batch) -> None:
    assert len(CASES) >= 40
    assert batch.result.returncode == 0, batch.result.stderr
    assert "Traceback" not in batch.result.stderr, batch.result.stderr
    assert batch.elapsed < 45
    for rec in batch.records.values():
        assert rec.state in (JobState.SUCCEEDED, JobState.FAILED), rec
        assert rec.processed_path and os.path.lexists(batch.env.layout.root / rec.processed_path)
    assert not list(batch.env.layout.runs.glob("*/prompt.md")), "every prompt was finalized"


def test_nothing_outside_the_root_was_touched(batch: Batch) -> None:
    assert _snapshot(batch.env.outside) == batch.outside_before
    for log in batch.env.layout.runs.glob(f"*/{LOG_FILE}"):
        assert SECRET not in log.read_text()
    for events in batch.env.layout.runs.glob("*/events.jsonl"):
        assert SECRET not in events.read_text()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, batch: Batch) -> None:
    if case.id in batch.skipped:
        pytest.skip(batch.skipped[case.id])
    layout = batch.env.layout
    path = batch.paths[case.id]
    inbox_rel = printable(layout.relative(path))  # as records show a non-UTF-8 name
    record = batch.records.get(inbox_rel)
    if case.expect == IGNORED:
        assert record is None, record
        assert os.path.lexists(path), "an ignored file stays where it was"
    elif case.expect == OK:
        assert record is not None, f"{inbox_rel} was never claimed"
        if case.check is None:
            assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record
    else:
        assert record is not None, f"{inbox_rel} was never claimed"
        assert (record.state, record.reason) == (JobState.FAILED, case.expect), record
        assert record.detail, record
        assert record.detail.startswith(inbox_rel), record.detail
        for fragment in case.hints:
            assert fragment in record.detail, (fragment, record.detail)
        assert record.exit_code is None and record.pid is None, "a bad prompt never ran"
        assert not os.path.lexists(path), "the bad prompt left the inbox"
        processed = layout.root / (record.processed_path or "")
        assert os.path.lexists(processed), "and was filed under processed/"
    if case.check is not None:
        case.check(batch, path, record)


# -- timing-dependent cases: a background watcher --------------------------------------


def job_records(layout: Layout) -> list[JobRecord]:
    out = []
    for run_dir in sorted(layout.runs.iterdir()):
        if run_dir.name.startswith("."):
            continue
        try:
            out.append(read_record(run_dir))
        except FileNotFoundError:
            continue
    return out


def finished(layout: Layout, name: str) -> JobRecord | None:
    for rec in job_records(layout):
        if rec.name == name and rec.state in (JobState.SUCCEEDED, JobState.FAILED):
            return rec
    return None


def start_ready(layout: Layout, watchers) -> subprocess.Popen[str]:
    """A background watcher, proven to be serving (its inotify watch is up)."""
    proc = watchers.start()
    drop(layout, "warmup", bash("true"))
    wait_for(lambda: finished(layout, "warmup"), what="the watcher to serve a first prompt")
    return proc


def test_file_deleted_between_event_and_claim(layout: Layout, watchers) -> None:
    proc = start_ready(layout, watchers)
    for i in range(25):
        path = drop(layout, f"ghost-{i}", bash("echo ghost"))
        path.unlink(missing_ok=True)
    drop(layout, "after-ghosts", bash("echo after"))
    wait_for(lambda: finished(layout, "after-ghosts"), what="the good prompt to finish")
    rec = finished(layout, "after-ghosts")
    assert rec is not None and rec.state is JobState.SUCCEEDED
    assert proc.poll() is None, "the watcher is still up"
    for rec in job_records(layout):
        # a ghost claimed before its unlink is a normal job; one deleted first leaves no trace
        wait_for(
            lambda r=rec: read_record(layout.run_dir(r.id)).state is JobState.SUCCEEDED,
            what=f"{rec.name} to finish",
        )
    leftovers = [
        d
        for d in layout.runs.iterdir()
        if not d.name.startswith(".") and not (d / "job.json").exists()
    ]
    assert leftovers == [], "a lost race leaves no empty run directory"


def test_file_still_being_written_is_not_claimed(layout: Layout, watchers) -> None:
    proc = start_ready(layout, watchers)
    path = layout.inbox / "half.prompt.md"
    with open(path, "w") as f:
        f.write('+++\nagent = "bash"\n+++\necho first-')
        f.flush()
        # The watcher's turns run past settle (0.3 s) and a rescan (0.5 s).
        beat_advanced(layout, 1.2)
        assert path.exists(), "a prompt held open for writing is not claimed"
        assert finished(layout, "half") is None
        f.write("half\n")
    wait_for(lambda: finished(layout, "half"), what="the completed prompt to run")
    rec = finished(layout, "half")
    assert rec is not None and rec.state is JobState.SUCCEEDED
    assert (layout.run_dir(rec.id) / LOG_FILE).read_text() == "first-half\n"
    assert proc.poll() is None


def test_too_deep_is_not_picked_up_even_with_a_live_watcher(layout: Layout, watchers) -> None:
    """Beyond MAX_DEPTH nothing is claimed: not by the rescan, not by an inotify hint."""
    deep = layout.inbox.joinpath(*(f"d{i}" for i in range(MAX_DEPTH + 4)))
    deep.mkdir(parents=True)  # watched before the watcher starts, so its events do arrive
    shallow = layout.inbox.joinpath(*(f"d{i}" for i in range(MAX_DEPTH)))  # deepest allowed
    proc = start_ready(layout, watchers)
    deep_path = drop(layout, "deep", bash("echo deep"), sub=str(deep.relative_to(layout.inbox)))
    drop(layout, "shallow", bash("echo shallow"), sub=str(shallow.relative_to(layout.inbox)))
    wait_for(lambda: finished(layout, "shallow"), what="the prompt at an allowed depth")
    drop(layout, "after-deep", bash("echo after"))
    wait_for(lambda: finished(layout, "after-deep"), what="a later prompt")
    assert deep_path.read_text() == bash("echo deep"), "the too-deep file is untouched"
    assert [r for r in job_records(layout) if r.name == "deep"] == []
    assert proc.poll() is None


def test_hidden_folder_is_not_picked_up_by_a_live_watcher(layout: Layout, watchers) -> None:
    """Dot-folders are not descended into by the rescan; inotify hints agree."""
    (layout.inbox / ".drafts").mkdir()
    proc = start_ready(layout, watchers)
    hidden = drop(layout, "secret", bash("echo hidden"), sub=".drafts")
    drop(layout, "visible", bash("echo visible"))
    wait_for(lambda: finished(layout, "visible"), what="the visible prompt")
    assert hidden.exists()
    assert [r for r in job_records(layout) if r.name == "secret"] == []
    assert proc.poll() is None


def test_unclaimable_prompt_is_logged_once(layout: Layout, watchers, tmp_path: Path) -> None:
    """A prompt on another filesystem (rename fails with EXDEV) is skipped and
    logged once, across full rescans and the partial rescans a prompt still
    being written triggers on every turn."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = layout.inbox / "elsewhere"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    log = tmp_path / "watcher.log"
    try:
        (mount / "stuck.prompt.md").write_text('+++\nagent = "bash"\n+++\ntrue\n')
        watchers.start(stderr=log)
        wait_for(lambda: "skipping" in log.read_text(), what="the skip to be logged")
        with open(layout.inbox / "slow.prompt.md", "w") as f:  # held open: partial rescans
            f.write('+++\nagent = "bash"\n+++\n')
            f.flush()
            # Several full rescans (rescan_interval 0.5 s) run while it is held open.
            beat_advanced(layout, 1.6)
            f.write("true\n")
        wait_for(lambda: finished(layout, "slow"), what="the slow prompt to run")
        assert log.read_text().count("skipping") == 1
        assert (mount / "stuck.prompt.md").exists()
    finally:
        watchers.stop_all()
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_non_utf8_name_survives_claim_completion_after_a_crash(layout: Layout, watchers) -> None:
    """Killed between the claim rename and job.json: the restarted watcher completes the
    claim from claim.json (the name comes back with surrogate escapes) and files the
    job as failed with a printable name, instead of crashing at every start."""
    crashing = watchers.start(env={"HOPPER_CRASH_AT": "claim.after_rename"})
    path = layout.inbox / NON_UTF8
    path.write_text(bash("echo latin1"))
    assert crashing.wait(timeout=20) == -9, "the watcher died at the crash point"
    [run_dir] = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert not (run_dir / "job.json").exists(), "the claim was left half done"
    proc = start_ready(layout, watchers)
    wait_for(lambda: (run_dir / "job.json").exists(), what="the claim to be completed")
    wait_for(
        lambda: read_record(run_dir).state is JobState.FAILED, what="the job to be filed failed"
    )
    rec = read_record(run_dir)
    assert rec.reason is Reason.BAD_PROMPT
    assert rec.inbox_path == "inbox/caf\\xe9-\\xff.prompt.md"
    assert rec.detail and "not valid UTF-8" in rec.detail
    assert proc.poll() is None


def _make_long_path(inbox: Path) -> tuple[int, str]:
    """16 folders of 255-byte names below the inbox (within MAX_DEPTH, past PATH_MAX),
    with a prompt at the bottom; built through directory fds (a path that long
    cannot be passed to open(2)). Returns (the length of its path, its last folder)."""
    name = "p" * 255
    fd = os.open(inbox, os.O_RDONLY | os.O_DIRECTORY)
    length = len(str(inbox))
    try:
        for _ in range(16):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            length += 256
        out = os.open("x.prompt.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, bash("echo too-long").encode())
        os.close(out)
    finally:
        os.close(fd)
    return length, name


def test_inbox_path_longer_than_path_max_is_skipped_with_one_log_line(
    layout: Layout, hopper
) -> None:
    length, _ = _make_long_path(layout.inbox)
    assert length > os.pathconf("/", "PC_PATH_MAX")
    drop(layout, "good", bash("echo good"))
    result = hopper("run", "--until-idle", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    skips = [line for line in result.stderr.splitlines() if "skipping" in line]
    assert len(skips) == 1, skips
    assert "File name too long" in skips[0]
    assert finished(layout, "good") is not None
    assert [r.name for r in job_records(layout)] == ["good"]


def _deep_tree(top: Path, depth: int) -> None:
    """``top/d/d/…/d``, ``depth`` folders, made one at a time (os.makedirs recurses)."""
    top.mkdir()
    folder = top
    for _ in range(depth):
        folder = folder / "d"
        folder.mkdir()


def _remove_deep_tree(top: Path) -> None:
    """Remove what ``_deep_tree`` made, deepest first, without recursion: left in place,
    the tree makes the next pytest's clean-up of old temp dirs hit RecursionError."""
    folders = []
    folder = top
    while folder.is_dir():
        folders.append(folder)
        for name in os.listdir(folder):
            if name != "d":
                os.unlink(folder / name)
        folder = folder / "d"
    for folder in reversed(folders):
        folder.rmdir()


def _claim_latency(layout: Layout, name: str) -> float:
    started = time.monotonic()
    path = drop(layout, name, bash(f"echo {name}"))
    wait_for(lambda: not path.exists(), timeout=20, what=f"{name} to be claimed")
    return time.monotonic() - started


def test_a_directory_tree_1000_deep_keeps_inotify_alive(layout: Layout, tmp_path: Path) -> None:
    """Rescans are 60 s apart here, so a claim within seconds proves inotify still works:
    with a 1000-deep tree present at start (Observer.start raised RecursionError) and
    with one created while the watcher runs (it killed the inotify thread)."""
    config = tmp_path / "slow-rescan.toml"
    config.write_text(FAST_CONFIG.replace('rescan_interval = "0.5s"', 'rescan_interval = "60s"'))
    _deep_tree(layout.inbox / "before", 1000)
    watchers = Watchers(layout, config)
    try:
        proc = start_ready(layout, watchers)
        assert _claim_latency(layout, "first") < 5
        _deep_tree(layout.inbox / "live", 1000)
        assert _claim_latency(layout, "second") < 5
        assert proc.poll() is None
        wait_for(lambda: finished(layout, "second"), what="the second prompt to run")
    finally:
        watchers.stop_all()
        _remove_deep_tree(layout.inbox / "before")
        _remove_deep_tree(layout.inbox / "live")
