"""``hopper web``: the command, the token file, and the error without the extra."""

from __future__ import annotations

import io
import os
import pty
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from hopper.cli.main import main
from hopper.store.layout import Layout
from hopper.web.gate import cookie_name, session_value
from hopper.web.token import BadTokenFile, load_or_create, read_token, token_path
from waiting import poll_until
from web.webtools import free_port


def test_without_the_extra_it_names_the_install_command(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m.startswith("hopper.web")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn -> ImportError
    assert main(["web", "--root", str(layout.root)]) == 1
    err = capsys.readouterr().err
    assert "./install.sh --web" in err and "-m pip install '.[web]'" in err and "uvicorn" in err
    assert "not 'pip install hopper[web]'" in err  # PyPI's "hopper" is someone else's


def start_web(layout: Layout, port: int, *extra: str, **streams: Any) -> subprocess.Popen[str]:
    root = str(layout.root)
    return subprocess.Popen(
        [sys.executable, "-m", "hopper", "web", *extra, "--root", root, "--port", str(port)],
        text=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **streams},
    )


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)  # what systemctl stop sends
    proc.wait(timeout=15)
    # uvicorn re-raises the signal once it has shut down cleanly (systemd counts that as a
    # clean stop): no traceback, no other exit
    assert proc.returncode in (0, -signal.SIGTERM)


def test_hopper_web_on_a_terminal_prints_the_url_and_serves_it(layout: Layout) -> None:
    port = free_port()
    master, slave = pty.openpty()
    proc = start_web(layout, port, stdout=slave)
    os.close(slave)
    try:
        got = b""
        while not got.endswith(b"\n"):  # the URL line, on the terminal
            ready, _, _ = select.select([master], [], [], 30)
            assert ready, "hopper web printed no URL on its terminal"
            got += os.read(master, 4096)
        url = got.decode().strip()
        token = token_path(layout).read_text().strip()
        assert url == f"http://127.0.0.1:{port}/?token={token}"
        assert token_path(layout).stat().st_mode & 0o777 == 0o600
        poll_until(lambda: listening(port), 20, "hopper web to listen")
        r = httpx.get(url, follow_redirects=False)
        assert r.status_code == 303
        assert httpx.get(f"http://127.0.0.1:{port}/api/jobs").status_code == 401
    finally:
        stop(proc)
        os.close(master)
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def test_off_a_terminal_the_token_is_never_printed_and_print_url_gives_it(
    layout: Layout,
) -> None:
    """A service's stdout is the journal (or a pipe, a log file): the URL stays out of it;
    the line printed instead says how to get it."""
    port = free_port()
    proc = start_web(layout, port)
    try:
        poll_until(lambda: listening(port), 20, "hopper web to listen")
        token = read_token(token_path(layout))
    finally:
        stop(proc)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    assert token not in out and token not in err and out == ""
    hint = f"hopper web --print-url --root {layout.root} --port {port}"
    assert hint in err and str(token_path(layout)) in err
    asked = subprocess.run(
        [sys.executable, "-m", "hopper", *hint.split()[1:]], capture_output=True, text=True
    )
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout == f"http://127.0.0.1:{port}/?token={token}\n"


def test_the_journal_never_gets_the_token_even_on_a_terminal(
    layout: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JOURNAL_STREAM names stderr's device:inode when systemd connects it to the journal."""
    from hopper.web.listen import may_print_token

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    journal = (tmp_path / "journal").open("w")
    st = os.fstat(journal.fileno())
    assert may_print_token(Terminal(), journal)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert not may_print_token(Terminal(), journal)
    journal.close()


def test_a_taken_port_is_one_line_before_any_token(layout: Layout) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        proc = start_web(layout, port)
        out, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 1
    assert out == ""
    assert err.startswith(f"hopper web: 127.0.0.1:{port} is in use (by pid {os.getpid()} (")
    assert err.endswith("?); pick another with --port\n") and err.count("\n") == 1
    assert not token_path(layout).exists()  # nothing made, nothing printed


def test_print_url_with_new_token_is_refused(layout: Layout) -> None:
    root = str(layout.root)
    r = subprocess.run(
        [sys.executable, "-m", "hopper", "web", "--print-url", "--new-token", "--root", root],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert "restart it with --new-token, then --print-url" in r.stderr
    assert not token_path(layout).exists()


def test_the_token_is_made_once_and_kept(layout: Layout) -> None:
    first = load_or_create(layout)
    assert load_or_create(layout) == first
    assert len(first) >= 32


def test_a_token_file_others_can_read_is_refused(layout: Layout) -> None:
    load_or_create(layout)
    os.chmod(token_path(layout), 0o644)
    with pytest.raises(BadTokenFile, match="chmod 600"):
        load_or_create(layout)


def test_a_linked_or_garbage_token_file_is_refused(layout: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("x" * 43)
    elsewhere.chmod(0o600)
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    token_path(layout).symlink_to(elsewhere)
    with pytest.raises(BadTokenFile, match="rm "):
        read_token(token_path(layout))
    token_path(layout).unlink()
    token_path(layout).write_text("short\n")
    token_path(layout).chmod(0o600)
    with pytest.raises(BadTokenFile, match="does not hold a token"):
        load_or_create(layout)


def listening(port: int) -> bool:
    """The port is bound before the URL is printed, but uvicorn listens a moment later."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def test_new_token_revokes_the_old_token_and_its_session_cookie(layout: Layout) -> None:
    old = load_or_create(layout)
    port = free_port()
    proc = start_web(layout, port, "--new-token")
    try:
        poll_until(lambda: listening(port), 20, "hopper web to listen")
        new = read_token(token_path(layout))
        assert new != old
        assert token_path(layout).stat().st_mode & 0o777 == 0o600
        base = f"http://127.0.0.1:{port}"
        assert (
            httpx.get(f"{base}/api/jobs", headers={"authorization": f"Bearer {old}"}).status_code
            == 401
        )
        stale = {"cookie": f"{cookie_name(old)}={session_value(old)}"}
        assert httpx.get(f"{base}/ui/api/jobs", headers=stale).status_code == 401
        fresh = {"cookie": f"{cookie_name(new)}={session_value(new)}"}
        assert httpx.get(f"{base}/ui/api/jobs", headers=fresh).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert [p.name for p in layout.state_dir.iterdir() if "web-token" in p.name] == ["web-token"]
