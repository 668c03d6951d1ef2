"""sd_notify against real AF_UNIX datagram sockets: one in tmp_path, one abstract."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopper.sdnotify import ENV_KEYS, Notifier

RECV_DEADLINE_S = 5.0
SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) minus the terminating NUL


class Receiver:
    """The systemd end: a bound datagram socket and the NOTIFY_SOCKET value for it."""

    def __init__(self, sock: socket.socket, notify_socket: str) -> None:
        self.sock = sock
        self.notify_socket = notify_socket

    def env(self, **extra: str) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.notify_socket, **extra}

    def recv(self) -> str:
        """The next datagram; fails the test if none arrives within the deadline."""
        self.sock.settimeout(RECV_DEADLINE_S)
        return self.sock.recv(4096).decode()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    path = tmp_path / "notify.sock"
    assert len(os.fsencode(path)) <= SUN_PATH_MAX, f"tmp_path too long for AF_UNIX: {path}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield Receiver(sock, str(path))


@pytest.fixture
def abstract_receiver() -> Iterator[Receiver]:
    name = f"hopper-test-{secrets.token_hex(8)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        yield Receiver(sock, "@" + name)


def watchdog_env(receiver: Receiver, pid: int | None) -> dict[str, str]:
    env = receiver.env(WATCHDOG_USEC="30000000")
    if pid is not None:
        env["WATCHDOG_PID"] = str(pid)
    return env


def test_ready(receiver: Receiver) -> None:
    assert Notifier(receiver.env()).ready() is True
    assert receiver.recv() == "READY=1"


def test_ready_with_status(receiver: Receiver) -> None:
    Notifier(receiver.env()).ready(status="idle")
    assert receiver.recv() == "READY=1\nSTATUS=idle"


def test_status(receiver: Receiver) -> None:
    Notifier(receiver.env()).status("2 running, 5 queued — ok")
    assert receiver.recv() == "STATUS=2 running, 5 queued — ok"


def test_status_newlines_cannot_inject_assignments(receiver: Receiver) -> None:
    Notifier(receiver.env()).status("line one\nREADY=1")
    assert receiver.recv() == "STATUS=line one READY=1"


def test_watchdog_for_this_pid(receiver: Receiver) -> None:
    notifier = Notifier(watchdog_env(receiver, os.getpid()))
    assert notifier.watchdog_enabled
    assert notifier.watchdog_interval() == 15.0
    assert notifier.watchdog() is True
    assert receiver.recv() == "WATCHDOG=1"


def test_watchdog_without_pid_is_ours(receiver: Receiver) -> None:
    notifier = Notifier(watchdog_env(receiver, None))
    assert notifier.watchdog() is True
    assert receiver.recv() == "WATCHDOG=1"


def test_watchdog_pid_mismatch_disables_watchdog(receiver: Receiver) -> None:
    notifier = Notifier(watchdog_env(receiver, os.getpid() + 1))
    assert not notifier.watchdog_enabled
    assert notifier.watchdog_interval() is None
    assert notifier.watchdog() is False
    # Datagrams arrive in order: if WATCHDOG=1 had been sent, it would come first.
    notifier.status("marker")
    assert receiver.recv() == "STATUS=marker"


@pytest.mark.parametrize("usec", ["", "0", "-5", "soon"])
def test_watchdog_bad_usec_disables_watchdog(receiver: Receiver, usec: str) -> None:
    notifier = Notifier(receiver.env(WATCHDOG_USEC=usec))
    assert notifier.watchdog_interval() is None
    assert notifier.watchdog() is False


def test_watchdog_without_usec_sends_nothing(receiver: Receiver) -> None:
    notifier = Notifier(receiver.env())
    assert notifier.watchdog() is False
    notifier.status("marker")
    assert receiver.recv() == "STATUS=marker"


def test_stopping(receiver: Receiver) -> None:
    Notifier(receiver.env()).stopping()
    assert receiver.recv() == "STOPPING=1"


def test_reloading_with_monotonic_usec(receiver: Receiver) -> None:
    Notifier(receiver.env()).reloading(123456789)
    assert receiver.recv() == "RELOADING=1\nMONOTONIC_USEC=123456789"


def test_reloading_defaults_to_clock_monotonic(receiver: Receiver) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    Notifier(receiver.env()).reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = receiver.recv().split("\n")
    assert first == "RELOADING=1"
    key, value = second.split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_extend_timeout(receiver: Receiver) -> None:
    Notifier(receiver.env()).extend_timeout(5_000_000)
    assert receiver.recv() == "EXTEND_TIMEOUT_USEC=5000000"


def test_notify_generic_fields_in_order(receiver: Receiver) -> None:
    Notifier(receiver.env()).notify(STATUS="draining", ERRNO=0, BUSERROR="x.y")
    assert receiver.recv() == "STATUS=draining\nERRNO=0\nBUSERROR=x.y"


def test_abstract_namespace_socket(abstract_receiver: Receiver) -> None:
    notifier = Notifier(abstract_receiver.env(WATCHDOG_USEC="2000000"))
    notifier.ready()
    notifier.watchdog()
    notifier.reloading(42)
    notifier.stopping()
    assert abstract_receiver.recv() == "READY=1"
    assert abstract_receiver.recv() == "WATCHDOG=1"
    assert abstract_receiver.recv() == "RELOADING=1\nMONOTONIC_USEC=42"
    assert abstract_receiver.recv() == "STOPPING=1"


def test_reads_os_environ_by_default(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", receiver.notify_socket)
    Notifier().ready()
    assert receiver.recv() == "READY=1"


def test_unset_socket_is_a_no_op(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="hopper.sdnotify")
    notifier = Notifier({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())})
    assert not notifier.enabled
    assert not notifier.watchdog_enabled
    assert notifier.watchdog_interval() is None
    results = [
        notifier.ready(),
        notifier.status("x"),
        notifier.watchdog(),
        notifier.stopping(),
        notifier.reloading(1),
        notifier.notify(READY=1),
    ]
    assert results == [False] * len(results)
    assert caplog.records == []


def test_empty_socket_is_a_no_op() -> None:
    assert Notifier({"NOTIFY_SOCKET": ""}).ready() is False


def test_missing_socket_path_does_not_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hopper.sdnotify")
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False  # no WATCHDOG_USEC: not even attempted
    assert notifier.status("x") is False
    assert notifier.stopping() is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "a failing socket is reported once, not on every ping"
    assert "gone.sock" in warnings[0].getMessage()


def test_socket_that_is_not_a_socket_does_not_raise(tmp_path: Path) -> None:
    plain = tmp_path / "plain-file"
    plain.write_text("")
    assert Notifier({"NOTIFY_SOCKET": str(plain)}).ready() is False


def test_relative_socket_is_disabled_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": "relative/notify"})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert "relative/notify" in caplog.text


def test_env_keys_name_the_protocol_variables() -> None:
    assert set(ENV_KEYS) == {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
