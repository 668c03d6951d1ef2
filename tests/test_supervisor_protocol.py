"""The supervisor's contract (proc/protocol.py), held to the shell's models on both sides."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from hopper.core.record import ExitStatus, Resources
from hopper.proc import protocol, spawn
from hopper.proc.protocol import LIMITS, RESOURCE_KEYS, ExitRecord, LaunchSpec, ProtocolError


def _spec(run_dir: Path, argv: list[str]) -> LaunchSpec:
    return LaunchSpec(
        argv=argv,
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )


def _run(run_dir: Path, argv: list[str]) -> bytes:
    """Run ``argv`` under the real supervisor; exit.json as it wrote it."""
    proc = spawn.launch(run_dir, _spec(run_dir, argv))
    spawn.read_pid(proc)
    spawn.release(proc)
    assert proc.wait(timeout=30) == 0
    return (run_dir / "exit.json").read_bytes()


def test_the_real_supervisors_exit_json_validates_against_exit_status(tmp_path: Path) -> None:
    raw = _run(tmp_path, ["sh", "-c", "echo hello; exit 3"])
    status = ExitStatus.model_validate_json(raw)
    record = ExitRecord.from_json(raw)
    assert (status.started, status.exit_code, status.signal) == (True, 3, None)
    assert status.resources is not None and status.resources.output_bytes == len("hello\n")
    # Every field the supervisor wrote reached the shell's model unchanged.
    dumped = status.model_dump(mode="json")
    dumped["resources"] = status.resources.model_dump(mode="json", exclude_none=True)
    for name, value in json.loads(raw).items():
        if name != "finished_at":
            assert dumped[name] == value, name
    assert status.finished_at.isoformat() == record.finished_at


def test_exit_record_and_exit_status_have_the_same_fields() -> None:
    record_fields = {f.name for f in dataclasses.fields(ExitRecord)}
    assert record_fields == set(ExitStatus.model_fields)
    assert set(RESOURCE_KEYS) == set(Resources.model_fields)
    limit = typing.get_args(ExitStatus.model_fields["limit"].annotation)
    assert set(typing.get_args(limit[0])) == set(LIMITS)


def test_an_exit_record_maps_to_exit_status_and_back() -> None:
    record = ExitRecord(
        started=True,
        finished_at="2026-11-23T10:00:00.000001+00:00",
        supervisor_pid=10,
        pid=11,
        exit_code=None,
        signal=9,
        timed_out=True,
        stop_signal_sent=True,
        leftovers_killed=2,
        escaped=1,
        limit="output",
        resources={"cpu_seconds": 1.5, "peak_rss_bytes": 4096, "output_bytes": 7},
        error="boom",
    )
    status = ExitStatus.model_validate_json(record.to_json())
    back = status.model_dump(mode="json")
    back["finished_at"] = status.finished_at.isoformat()
    back["resources"] = {k: v for k, v in back["resources"].items() if v is not None}
    assert ExitRecord.from_json(json.dumps(back)) == record


def test_a_launch_spec_round_trips(tmp_path: Path) -> None:
    spec = dataclasses.replace(
        _spec(tmp_path, ["echo", "a b"]),
        stop_signals=[2, 15],
        timeout=5,
        memory_max=1 << 30,
        output_max=1000,
        sample_interval=0.5,
        idle_timeout=3.0,
        run_dir=str(tmp_path),
        long_gate=True,
    )
    assert LaunchSpec.from_json(spec.to_json()) == spec
    # The defaults live in one place: a minimal spec gets them.
    minimal = LaunchSpec.from_json(json.dumps({"argv": ["x"], "cwd": "/", "env": {}, "log": "l"}))
    assert (minimal.grace, minimal.sample_interval, minimal.stop_signals) == (10.0, 1.0, [15])


def test_a_launch_specs_fields_are_checked_once_per_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built by the watcher (checked), sent with its run_dir (not built and checked
    again: the whole environment, per job); the line is what from_json takes back."""
    checked: list[str] = []
    real = protocol._validated

    def counted(what: str, data: object, checks: typing.Any) -> dict[str, typing.Any]:
        checked.append(what)
        return real(what, data, checks)

    monkeypatch.setattr(protocol, "_validated", counted)
    spec = dataclasses.replace(_spec(tmp_path, ["true"]), files={"script.sh": "true\n"})
    checked.clear()
    line = spawn._payload(tmp_path / "run", spec)
    assert checked == []
    assert LaunchSpec.from_json(line) == dataclasses.replace(spec, run_dir=str(tmp_path / "run"))
    assert json.loads(spec.to_json())["run_dir"] is None  # the spec itself unchanged


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"grace": "10"}, "'grace' must be a number of seconds, got '10'"),
        ({"argv": "sleep 1"}, "'argv' must be a list of strings"),
        ({"env": {"A": 1}}, "'env' must be an object of strings"),
        ({"memory_max": True}, "'memory_max' must be a whole number of bytes or null"),
        ({"stop_signals": ["TERM"]}, "'stop_signals' must be a list of signal numbers"),
        ({"greace": 1.0}, "unknown key(s) 'greace'"),
        ({"long_gate": 1}, "'long_gate' must be true or false, got 1"),
    ],
)
def test_a_bad_launch_spec_is_refused_naming_the_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    data = {**json.loads(_spec(tmp_path, ["true"]).to_json()), **change}
    with pytest.raises(ProtocolError, match=r"^launch spec") as info:
        LaunchSpec.from_json(json.dumps(data))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "expected a JSON object, got list"),
        ('{"argv": ["x"]}', "missing cwd, env, log"),
    ],
)
def test_a_malformed_launch_spec_is_refused(text: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        LaunchSpec.from_json(text)


def test_a_launch_spec_of_the_wrong_type_cannot_be_built(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match="'timeout' must be a number of seconds or null"):
        dataclasses.replace(_spec(tmp_path, ["true"]), timeout="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"limit": "disk"}, "'limit' must be one of memory, output, idle or null"),
        ({"resources": {"cpu": 1}}, "'resources' must be an object of numbers"),
        ({"exit_code": "3"}, "'exit_code' must be an exit code or null"),
        ({"extra": 1}, "unknown key(s) 'extra'"),
    ],
)
def test_a_bad_exit_record_is_refused(change: dict[str, object], message: str) -> None:
    data = {"started": True, "finished_at": "2026-11-23T10:00:00+00:00", **change}
    with pytest.raises(ProtocolError, match=r"^exit\.json") as info:
        ExitRecord.from_json(json.dumps(data))
    assert message in str(info.value)


def test_the_real_supervisor_refuses_a_bad_spec_and_says_why(tmp_path: Path) -> None:
    """A spec from a mismatched watcher: no job is forked, stderr names the field."""
    data = {**json.loads(_spec(tmp_path, ["true"]).to_json()), "grace": "soon"}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(spawn.SUPERVISOR_SCRIPT), str(tmp_path)],
        input=json.dumps(data).encode() + b"\n",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""  # no pid line: spawn.read_pid reports a broken handshake
    assert b"'grace' must be a number of seconds, got 'soon'" in proc.stderr
    assert not (tmp_path / "exit.json").exists()


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, "x", null, true]}',
        ' \n{"t": NaN, "u": Infinity, "v": -Infinity}\n',
        b'{"a": "\\u00e9t\\u00e9"}\n',
        '{"a": "\u00e9"}',
    ],
)
def test_a_spec_line_parses_as_json_loads_does(text: str | bytes) -> None:
    """protocol's own parse (_json's scanner, no json.decoder) reads what json.loads reads."""
    assert repr(protocol._parse("x", text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["", "  ", '{"a": 1} x', '{"a": 1}{}', b"\xff{}", "{'a': 1}"])
def test_what_json_loads_refuses_is_not_json(text: str | bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ProtocolError, match=r"^x: not JSON"):
        protocol._parse("x", text)
