"""``hopper web``: the command, the token file, and the error without the extra."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

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


def test_hopper_web_prints_the_url_and_serves_it(layout: Layout, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hopper", "web", "--root", str(layout.root), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        token = token_path(layout).read_text().strip()
        assert url == f"http://127.0.0.1:{port}/?token={token}"
        assert token_path(layout).stat().st_mode & 0o777 == 0o600
        r = httpx.get(url, follow_redirects=False)
        assert r.status_code == 303
        assert httpx.get(f"http://127.0.0.1:{port}/api/jobs").status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)  # what systemctl stop sends
        proc.wait(timeout=15)
    # uvicorn re-raises the signal once it has shut down cleanly (systemd counts that as a
    # clean stop): no traceback, no other exit
    assert proc.returncode in (0, -signal.SIGTERM)
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


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
    """The URL is printed just before uvicorn binds: a client may come too early."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def test_new_token_revokes_the_old_token_and_its_session_cookie(layout: Layout) -> None:
    old = load_or_create(layout)
    port = free_port()
    root = str(layout.root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hopper", "web", "--new-token", "--root", root, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        new = read_token(token_path(layout))
        assert new != old and url.endswith(f"?token={new}")
        assert token_path(layout).stat().st_mode & 0o777 == 0o600
        base = f"http://127.0.0.1:{port}"
        poll_until(lambda: listening(port), 20, "hopper web to listen")
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
