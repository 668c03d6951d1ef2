"""An interactive job's terminal on its job page, in chromium: a hand-made terminal.cast
(asciicast v2) replayed through xterm.js (escapes interpreted, not shown), followed live
while the job runs; a job without one shows no terminal section."""

from __future__ import annotations

import json

from selenium import webdriver
from selenium.webdriver.common.by import By

from hopper.core.states import JobState
from hopper.store.layout import Layout
from web.test_browser import browser, until  # noqa: F401 - the fixture
from web.webtools import TOKEN, LiveServer, make_job


def cast_text(d: webdriver.Chrome) -> str:
    return str(d.find_element(By.CSS_SELECTOR, "#cast .xterm-rows").text)


def test_the_cast_is_replayed_then_followed_live(
    layout: Layout,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    run = make_job(layout, "chat-turn", JobState.RUNNING)
    make_job(layout, "plain", JobState.SUCCEEDED)
    header = {"version": 2, "width": 60, "height": 12, "timestamp": 1795600000}
    records = [
        header,
        [0.1, "o", "\x1b[1;32mwelcome\x1b[0m to the agent\r\n"],
        [0.2, "o", "\x1b[5;1Hrow five\x1b[1;30Hmoved"],  # cursor moves, drawn in place
        [0.3, "o", "\x1b[9;1H" + "w" * 65],  # wraps at the header's width
    ]
    cast = run / "terminal.cast"
    cast.write_text("".join(json.dumps(r) + "\n" for r in records))
    with LiveServer(layout) as live:
        browser.get(f"{live.url}/?token={TOKEN}#/job/chat-turn")
        until(browser, lambda d: "welcome to the agent" in cast_text(d), "the replay")
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#cast .xterm-rows > div')]"
            ".map((r) => r.textContent)"
        )
        assert rows[0].startswith("welcome to the agent") and rows[0].rstrip().endswith("moved")
        assert rows[4].startswith("row five")
        assert "[1;32m" not in cast_text(browser)  # the escapes were interpreted
        assert len(rows) == 12  # the header's size: 12 rows of 60 columns
        assert rows[8] == "w" * 60 and rows[9].rstrip() == "w" * 5
        with cast.open("a") as fh:
            fh.write(json.dumps([0.5, "o", "\x1b[7;1Hlive from the session"]) + "\n")
        until(browser, lambda d: "live from the session" in cast_text(d), "the live record")

        browser.get(f"{live.url}/ui/#/job/plain")
        until(browser, lambda d: d.find_element(By.ID, "job-title").text == "plain", "plain")
        assert not browser.find_element(By.ID, "cast-view").is_displayed()
