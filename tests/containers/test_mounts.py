"""core/mounts.py: the -v syntax and the host -> container path map (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper.core.mounts import (
    RUN_DIR_IN_CONTAINER,
    WORKDIR_IN_CONTAINER,
    BadMount,
    Mount,
    MountMap,
    parse,
    plan,
)


def test_parse_read_write_and_read_only() -> None:
    assert parse("/data:/data") == Mount("/data", "/data")
    assert parse("/srv/models/:/models:ro") == Mount("/srv/models", "/models", read_only=True)
    assert parse("~/cache:/cache:rw", home="/home/ann") == Mount("/home/ann/cache", "/cache")
    assert parse("/a:/b:ro").volume() == "/a:/b:ro"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("/data", "is not /host/path:/in/container"),
        ("/a:/b:/c:ro", "is not /host/path:/in/container"),
        ("data:/data", "host path 'data' is not absolute"),
        ("/data:data", "container path 'data' is not absolute"),
        ("/data:/data:rx", "mode 'rx' is not one of ro, rw"),
        ("/a/../etc:/x", "may not contain '..'"),
        ("/a,b:/x", "may not contain ','"),
        ("/data:/", "root directory"),
        ("/data:/work", "working directory"),
        ("/data:/work/sub", "working directory"),
        ("/data:/hopper", "run directory"),
        ("/data:/hopper/run/x", "run directory"),
        ("~/x:/x", "host path '~/x' is not absolute"),
    ],
)
def test_parse_refuses_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(BadMount, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


def test_plan_maps_workdir_run_dir_and_extra_mounts() -> None:
    m = plan("/home/ann/app", "/root/runs/j1", (parse("/srv/data:/data:ro"),))
    assert m.to_container("/home/ann/app") == WORKDIR_IN_CONTAINER
    assert m.to_container("/home/ann/app/src/x.py") == "/work/src/x.py"
    assert m.to_container("/root/runs/j1/prompt.md") == f"{RUN_DIR_IN_CONTAINER}/prompt.md"
    assert m.to_container("/srv/data/a/b") == "/data/a/b"
    assert m.to_container("/home/ann/application") is None  # a prefix, not a parent
    assert m.to_container("/etc/passwd") is None
    assert m.volume_args() == [
        "-v",
        "/root/runs/j1:/hopper/run",
        "-v",
        "/home/ann/app:/work",
        "-v",
        "/srv/data:/data:ro",
    ]


def test_scratch_workdir_inside_the_run_dir_maps_to_work() -> None:
    """The longest host prefix wins: runs/<id>/work is /work, not /hopper/run/work."""
    m = plan("/r/runs/j1/work", "/r/runs/j1")
    assert m.to_container("/r/runs/j1/work/out.txt") == "/work/out.txt"
    assert m.to_container("/r/runs/j1/script.sh") == "/hopper/run/script.sh"


def test_translate_leaves_what_is_no_mounted_path() -> None:
    m = plan("/w", "/r")
    assert m.translate("--verbose") == "--verbose"
    assert m.translate("/w/x") == "/work/x"
    assert m.translate("/usr/bin/env") == "/usr/bin/env"
    assert m.translate("relative/w") == "relative/w"


@pytest.mark.parametrize("bad", ["/a:b", "/a,b", "rel"])
def test_plan_refuses_paths_that_cannot_be_mounted(bad: str) -> None:
    with pytest.raises(BadMount, match="cannot be mounted"):
        plan(bad, "/r")
    with pytest.raises(BadMount, match="cannot be mounted"):
        plan("/w", bad)


segment = st.text(alphabet="abcdefgh._-", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)
paths = st.lists(segment, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))


@given(host=paths, inside=paths, rest=st.lists(segment, max_size=3))
def test_a_path_under_a_mount_maps_below_its_container_path(
    host: str, inside: str, rest: list[str]
) -> None:
    if inside.startswith(("/work", "/hopper")):
        inside = "/x" + inside
    m = MountMap((parse(f"{host}:{inside}"),))
    path = "/".join([host, *rest])
    assert m.to_container(path) == "/".join([inside, *rest])


@given(host=paths, other=paths)
def test_a_path_outside_every_mount_is_unchanged(host: str, other: str) -> None:
    m = MountMap((Mount(host, "/in"),))
    if other == host or other.startswith(host + "/"):
        assert m.to_container(other) is not None
    else:
        assert m.to_container(other) is None
        assert m.translate(other) == other


@given(outer=paths, inner=st.lists(segment, min_size=1, max_size=3))
def test_the_longest_host_prefix_wins(outer: str, inner: list[str]) -> None:
    nested = "/".join([outer, *inner])
    for order in (
        (Mount(outer, "/o"), Mount(nested, "/n")),
        (Mount(nested, "/n"), Mount(outer, "/o")),
    ):
        m = MountMap(order)
        assert m.to_container(nested + "/f") == "/n/f"
        assert m.to_container(outer) == "/o"
