"""store/layout.py: root precedence, processed paths, and ids that cannot escape."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopper.store.layout import Layout, PathEscapesRoot, default_root, inside, resolve_root

ENV = {"HOME": "/home/u", "XDG_STATE_HOME": "/xdg/state", "HOPPER_ROOT": "/env/root"}
JOB = "20261122-133540-042-fix-tests-3f9a"


@pytest.mark.parametrize(
    ("cli", "env", "config_root", "expected"),
    [
        ("/cli/root", ENV, "/cfg/root", "/cli/root"),
        (None, ENV, "/cfg/root", "/env/root"),
        (None, {**ENV, "HOPPER_ROOT": ""}, "/cfg/root", "/cfg/root"),
        (None, {"HOME": "/home/u", "XDG_STATE_HOME": "/xdg/state"}, None, "/xdg/state/hopper"),
        (None, {"HOME": "/home/u"}, None, "/home/u/.local/state/hopper"),
        (None, {"HOME": "/home/u", "XDG_STATE_HOME": ""}, None, "/home/u/.local/state/hopper"),
    ],
    ids=["cli", "env", "config", "xdg", "home", "empty-xdg"],
)
def test_resolve_root_precedence(
    cli: str | None, env: dict[str, str], config_root: str | None, expected: str
) -> None:
    assert resolve_root(cli, env, config_root) == Path(expected)


def test_resolve_root_is_absolute_and_expands_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    assert resolve_root("~/q", {}, None) == Path("/home/someone/q")
    rel = resolve_root("rel/dir", {}, None)
    assert rel.is_absolute() and rel == Path.cwd() / "rel" / "dir"
    assert resolve_root("/a/b/../c", {}, None) == Path("/a/c")


def test_default_root() -> None:
    assert default_root({"XDG_STATE_HOME": "/s"}) == Path("/s/hopper")


LAY = Layout(Path("/r"))


def test_processed_path_mirrors_sub_path() -> None:
    assert LAY.processed_path("inbox/team/a/fix tests.prompt.md", JOB) == Path(
        f"/r/processed/team/a/fix tests.{JOB}.prompt.md"
    )
    assert LAY.processed_path("inbox/x.prompt.md", JOB) == Path(f"/r/processed/x.{JOB}.prompt.md")


@pytest.mark.parametrize("stem", ["x" * 250, "é" * 200, "日本" * 100, "🚀" * 80 + "x"])
def test_processed_path_truncates_long_stems(stem: str) -> None:
    path = LAY.processed_path(f"inbox/deep/{stem}.prompt.md", JOB)
    name = path.name
    assert len(name.encode()) <= 255
    assert name.endswith(f".{JOB}.prompt.md")
    assert stem.startswith(name[: -len(f".{JOB}.prompt.md")])  # a prefix, cut on a char boundary
    assert path.parent == Path("/r/processed/deep")


def test_processed_path_of_a_longest_id_still_fits() -> None:
    long_id = "20261122-133540-042-" + "s" * 40 + "-ffff"
    assert (
        len(LAY.processed_path("inbox/" + "n" * 250 + ".prompt.md", long_id).name.encode()) <= 255
    )


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "/abs", ".", "..", ".hidden"])
def test_run_dir_refuses_unsafe_ids(bad: str) -> None:
    with pytest.raises(PathEscapesRoot):
        LAY.run_dir(bad)


def test_run_dir() -> None:
    assert LAY.run_dir(JOB) == Path(f"/r/runs/{JOB}")


def test_relative_and_subpath() -> None:
    assert LAY.relative(Path("/r/inbox/a/b.prompt.md")) == "inbox/a/b.prompt.md"
    assert LAY.inbox_subpath(Path("/r/inbox/a/b/c.prompt.md")) == Path("a/b")
    assert LAY.inbox_subpath(Path("/r/inbox/c.prompt.md")) == Path()


def test_inside_follows_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok").touch()
    (root / "out").symlink_to("/etc")
    assert inside(root, root / "ok")
    assert not inside(root, root / "out" / "passwd")
    assert not inside(root, root / ".." / "x")


def test_run_dirs_are_kept_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same Path for a job's run directory each time; a bad id refused every time;
    the kept answers cleared at RUN_DIRS_KEPT; two layouts of one root still equal."""
    from hopper.store import layout as layout_module

    monkeypatch.setattr(layout_module, "RUN_DIRS_KEPT", 3)
    layout = Layout(tmp_path)
    first = layout.run_dir("job-1")
    assert first == tmp_path / "runs" / "job-1" and layout.run_dir("job-1") is first
    assert layout.runs is layout.runs and layout.runs == tmp_path / "runs"
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(PathEscapesRoot):
            layout.run_dir(bad)
    for n in range(2, 6):
        assert layout.run_dir(f"job-{n}") == tmp_path / "runs" / f"job-{n}"
    assert len(layout._run_dirs) <= 3
    assert Layout(tmp_path) == layout and hash(Layout(tmp_path)) == hash(layout)
