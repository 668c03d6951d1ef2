"""End to end in a real browser: Debian's chromium and chromium-driver, driven by Selenium.

A real watcher runs real bash jobs; the dashboard is served by uvicorn on
127.0.0.1 with its rescan fallback at 30 s, so what the page shows within
seconds came through inotify and Server-Sent Events, never a reload. Under
CI (``CI=true``) a missing chromium fails; elsewhere these tests skip and say
what to install. The set-up of the first test saves a screenshot (set
``HOPPER_WEB_SCREENSHOT=docs/web.png`` to refresh the one in the docs).
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import Watchers, bash, drop
from hopper.store.layout import Layout
from hopper.web import feeds
from hopper.web.gate import cookie_name
from web.webtools import TOKEN, LiveServer

WAIT = 30.0
CHROME_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    why = (
        "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}; .ci/run installs them, and CI must run the browser tests")
    pytest.skip(why)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    for arg in (*CHROME_ARGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    options.binary_location = binary
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(
    layout: Layout, watchers: Watchers, live: LiveServer, browser: webdriver.Chrome
) -> webdriver.Chrome:
    """The dashboard loaded with the token, over a running watcher."""
    watchers.start()
    browser.get(f"{live.url}/?token={TOKEN}")
    until(browser, lambda d: "?token" not in d.current_url, "the token to leave the URL")
    until(browser, lambda d: d.find_element(By.ID, "live").get_attribute("class") == "on", "live")
    return browser


def until(driver: webdriver.Chrome, cond: Callable[[Any], Any], what: str) -> Any:
    def safe(d: Any) -> Any:
        try:
            return cond(d)
        except StaleElementReferenceException:
            return False  # the list was re-rendered under us: look again

    return WebDriverWait(driver, WAIT, poll_frequency=0.05).until(safe, f"waiting for {what}")


def row_state(driver: webdriver.Chrome, name: str) -> str | None:
    for row in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr"):
        if row.find_element(By.CLASS_NAME, "c-name").text == name:
            return row.get_attribute("data-state")
    return None


def open_job(driver: webdriver.Chrome, name: str) -> None:
    """Click the job's row (retried: the list re-renders every second while jobs run)."""

    def click(d: Any) -> bool:
        d.find_element(By.XPATH, f"//td[@class='c-name' and text()='{name}']").click()
        return True

    until(driver, click, f"a click on {name}")
    until(driver, lambda d: d.find_element(By.ID, "job-title").text == name, f"{name}'s page")


def terminal_text(driver: webdriver.Chrome) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, "#terminal .xterm-rows").text)


def test_a_job_goes_queued_running_succeeded_live(
    layout: Layout, page: webdriver.Chrome, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    (layout.root / "PAUSE").touch()
    until(page, lambda d: d.find_element(By.ID, "pause").text == "Resume", "the pause to show")
    script = (
        'printf "\\033[32mfirst line\\033[0m\\n"\n'
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"
        'echo "second line"\n'
    )
    drop(layout, "live-job", bash(script))
    until(page, lambda d: row_state(d, "live-job") == "queued", "live-job queued")
    page.find_element(By.ID, "pause").click()  # resume, from the page
    until(page, lambda d: row_state(d, "live-job") == "running", "live-job running")
    assert not (layout.root / "PAUSE").exists()
    open_job(page, "live-job")
    until(page, lambda d: "first line" in terminal_text(d), "the first log line")
    assert "second line" not in terminal_text(page)
    go.touch()
    until(page, lambda d: "second line" in terminal_text(d), "the second line, live")
    until(
        page,
        lambda d: d.find_element(By.ID, "job-state").get_attribute("data-state") == "succeeded",
        "the job page to say succeeded",
    )
    until(page, lambda d: "finalized" in d.find_element(By.ID, "events").text, "the events")
    assert page.find_element(By.ID, "job-abort").get_attribute("disabled") is not None
    shot = tmp_path / "web.png"
    page.get_screenshot_as_file(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("HOPPER_WEB_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)
    page.get(page.current_url.split("#")[0] + "#/")
    until(page, lambda d: row_state(d, "live-job") == "succeeded", "the list to say succeeded")
    until(
        page,
        lambda d: d.find_element(By.CSS_SELECTOR, ".count[data-state='succeeded'] b").text == "1",
        "the count of succeeded jobs",
    )


def test_abort_a_running_job_from_the_page(layout: Layout, page: webdriver.Chrome) -> None:
    drop(layout, "forever", bash('echo "started"\nwhile true; do sleep 0.1; done'))
    until(page, lambda d: row_state(d, "forever") == "running", "forever running")
    open_job(page, "forever")
    until(page, lambda d: "started" in terminal_text(d), "its output")
    page.find_element(By.ID, "job-abort").click()
    alert = WebDriverWait(page, WAIT).until(lambda d: d.switch_to.alert)
    assert "Abort job" in alert.text
    alert.accept()
    until(
        page,
        lambda d: d.find_element(By.ID, "job-state").get_attribute("data-state") == "aborted",
        "the job to be aborted",
    )
    assert any((d / "ABORT").exists() for d in layout.runs.iterdir())


def test_dismissing_the_confirmation_aborts_nothing(layout: Layout, page: webdriver.Chrome) -> None:
    drop(layout, "keep", bash("while true; do sleep 0.1; done"))
    until(page, lambda d: row_state(d, "keep") == "running", "keep running")
    open_job(page, "keep")
    until(page, lambda d: d.find_element(By.ID, "job-state").text == "running", "its page")
    page.find_element(By.ID, "job-abort").click()
    WebDriverWait(page, WAIT).until(lambda d: d.switch_to.alert).dismiss()
    assert not any((d / "ABORT").exists() for d in layout.runs.iterdir())
    (next(layout.runs.iterdir()) / "ABORT").touch()  # end it for the teardown


def test_submit_from_the_form_and_see_it_run(layout: Layout, page: webdriver.Chrome) -> None:
    page.get(page.current_url.split("#")[0] + "#/submit")
    form = page.find_element(By.ID, "submit")
    form.find_element(By.NAME, "agent").send_keys("bash")
    form.find_element(By.NAME, "name").send_keys("from-form")
    form.find_element(By.NAME, "body").send_keys("echo hello-from-the-form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(page, lambda d: "submitted:" in d.find_element(By.ID, "submit-result").text, "submit")
    page.get(page.current_url.split("#")[0] + "#/")
    until(page, lambda d: row_state(d, "from-form") == "succeeded", "from-form succeeded")
    open_job(page, "from-form")
    until(page, lambda d: "hello-from-the-form" in terminal_text(d), "its output")


def test_a_bad_submit_shows_the_reason(layout: Layout, page: webdriver.Chrome) -> None:
    page.get(page.current_url.split("#")[0] + "#/submit")
    form = page.find_element(By.ID, "submit")
    form.find_element(By.NAME, "agent").send_keys("no-such-agent")
    form.find_element(By.NAME, "body").send_keys("echo x")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(
        page,
        lambda d: "unknown agent 'no-such-agent'" in d.find_element(By.ID, "submit-result").text,
        "the reason",
    )
    assert list(layout.inbox.rglob("*.prompt.md")) == []


def test_without_the_token_the_page_shows_no_jobs(
    layout: Layout, live: LiveServer, browser: webdriver.Chrome
) -> None:
    drop(layout, "secret-job", bash("true"))
    browser.get(live.url + "/")
    assert "missing or wrong token" in browser.page_source
    assert "secret-job" not in browser.page_source


class _Listener(http.server.ThreadingHTTPServer):
    """Another web server on 127.0.0.1 (another user's, or a job's): notes every Cookie."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.seen.append((self.path, self.headers.get("cookie") or ""))
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_listener_on_another_port_never_sees_a_usable_credential(
    layout: Layout, live: LiveServer, browser: webdriver.Chrome
) -> None:
    browser.get(f"{live.url}/?token={TOKEN}")
    until(browser, lambda d: "?token" not in d.current_url, "the token to leave the URL")
    until(browser, lambda d: d.find_element(By.ID, "live").get_attribute("class") == "on", "live")
    other = _Listener()
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        port = other.server_address[1]
        for path in ("/", "/ui/", "/api/submit"):  # the browser visits the other port
            browser.get(f"http://127.0.0.1:{port}{path}")
            until(browser, lambda d: "ok" in d.page_source, f"the listener's {path}")
    finally:
        other.shutdown()
        other.server_close()
        thread.join(timeout=10)
    assert [p for p, _ in other.seen if not p.startswith("/favicon")] == [
        "/",
        "/ui/",
        "/api/submit",
    ]
    assert all(TOKEN not in cookie for _, cookie in other.seen), other.seen
    assert dict(other.seen)["/"] == ""  # outside /ui/ the browser sends it nothing
    values = [morsel.value for _, raw in other.seen for morsel in SimpleCookie(raw).values() if raw]
    assert values, "the browser sent the session cookie under /ui/ (as it would to any port)"
    submit = {"body": "echo stolen", "agent": "bash"}
    for value in values:
        r = httpx.post(
            f"{live.url}/api/submit", json=submit, headers={"authorization": f"Bearer {value}"}
        )
        assert r.status_code == 401, r.text
        r = httpx.post(
            f"{live.url}/api/submit",
            json=submit,
            headers={"cookie": f"{cookie_name(TOKEN)}={value}", "x-hopper-csrf": "1"},
        )
        assert r.status_code == 401, r.text
    assert list(layout.inbox.rglob("*.prompt.md")) == []


def test_a_page_dropped_for_falling_behind_reloads_and_carries_on(
    layout: Layout,
    page: webdriver.Chrome,
    live: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server drops a client that falls behind and sends `reload`; the page says so,
    its streams open again (after the retry delay) and it goes on showing the log live."""
    monkeypatch.setattr(feeds, "QUEUE_BYTES", 64 * 1024)  # any burst drops the page
    hub = live.server.config.app.state.hub
    follows: list[str] = []
    follow = hub.follow

    def counted(job_id: str, kind: str, state: str | None) -> Any:
        follows.append(kind)
        return follow(job_id, kind, state)

    monkeypatch.setattr(hub, "follow", counted)
    start, go = tmp_path / "start", tmp_path / "go"
    script = (
        'echo "ready"\n'
        f"while [ ! -e {start} ]; do sleep 0.05; done\n"
        "head -c 2000000 /dev/zero | tr '\\0' x | fold -w 100\n"
        'echo "AFTER-THE-BURST"\n'
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"
        'echo "live-after-reload"\n'
    )
    drop(layout, "bursty", bash(script))
    until(page, lambda d: row_state(page, "bursty") == "running", "bursty running")
    open_job(page, "bursty")
    until(page, lambda d: "ready" in terminal_text(d), "the first line")
    before = follows.count("log")
    start.touch()
    until(page, lambda d: "fell behind the log" in terminal_text(d), "the page to say so")
    until(page, lambda d: "AFTER-THE-BURST" in terminal_text(d), "the end of the burst")
    until(page, lambda d: follows.count("log") > before, "the page to follow the log again")
    go.touch()
    until(page, lambda d: "live-after-reload" in terminal_text(d), "the log, live again")
