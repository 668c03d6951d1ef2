"""The dashboard on a busy root, in Debian's chromium: 1,000 and 10,000 jobs, at desktop
and phone sizes. The list is a page from the server, so the badge "failed N" and the list
that clicking it shows agree; a search finds the oldest job; each failed row says why; a
phone never scrolls sideways. The deadlines are generous (a cold index of 10,000 jobs is
built on the first request): they catch a page that never loads, not a slow one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from hopper.store.layout import Layout
from web.test_browser import browser  # noqa: F401 - the fixture
from web.webtools import TOKEN, LiveServer, many_jobs

FIRST_LOAD = 180.0  # seconds: a cold index of 10,000 run directories on a loaded machine
WAIT = 60.0
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True}


def until(
    driver: webdriver.Chrome, cond: Callable[[Any], Any], what: str, wait: float = WAIT
) -> Any:
    def safe(d: Any) -> Any:
        try:
            return cond(d)
        except StaleElementReferenceException:
            return False

    return WebDriverWait(driver, wait, poll_frequency=0.1).until(safe, f"waiting for {what}")


def badge(d: webdriver.Chrome, state: str) -> str:
    return str(d.find_element(By.CSS_SELECTOR, f".count[data-state='{state}'] b").text)


def rows(d: webdriver.Chrome) -> list[tuple[str, str, str]]:
    """(name, state, why) of each row, read in one script (not three calls a row)."""
    found = d.execute_script(
        "return [...document.querySelectorAll('#jobs tbody tr')].map((r) => ["
        "r.querySelector('.c-name').textContent, r.dataset.state,"
        "r.querySelector('.c-why').textContent])"
    )
    return [(str(n), str(s), str(w)) for n, s, w in found]


def sideways(d: webdriver.Chrome) -> int:
    """How far the page scrolls sideways (0: it fits)."""
    return int(d.execute_script("return document.documentElement.scrollWidth - window.innerWidth"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("count", [1000, 10000])
def test_counts_match_the_list_search_finds_an_old_job_and_a_phone_fits(
    layout: Layout,
    browser: webdriver.Chrome,  # noqa: F811
    count: int,
) -> None:
    made = many_jobs(layout, count)
    with LiveServer(layout) as live:
        browser.get(f"{live.url}/?token={TOKEN}")
        until(browser, lambda d: badge(d, "failed") == str(made["failed"]), "counts", FIRST_LOAD)
        for state in ("succeeded", "aborted", "queued", "running"):
            assert badge(browser, state) == str(made[state])
        shown = rows(browser)
        assert len(shown) == 50 and shown[0][0] == f"job-{count - 1:06d}"  # newest first
        assert not browser.find_element(By.ID, "loading").is_displayed()

        browser.find_element(By.CSS_SELECTOR, ".count[data-state='failed']").click()
        total = f"of {made['failed']}"
        until(browser, lambda d: d.find_element(By.ID, "shown").text == f"showing 50 {total}", "50")
        for pages in (2, 3):
            browser.find_element(By.ID, "more").click()
            want = min(50 * pages, made["failed"])
            until(browser, lambda d, n=want: len(rows(d)) == n, f"{pages} pages of failed")
        failed = rows(browser)
        assert {state for _, state, _ in failed} == {"failed"}
        assert len({name for name, _, _ in failed}) == min(150, made["failed"])
        assert all(why == f"exit_nonzero · exit 1: error: {name} broke" for name, _, why in failed)

        browser.find_element(By.CSS_SELECTOR, "#filters select[name=state]").send_keys("any")
        search = browser.find_element(By.CSS_SELECTOR, "#filters input[name=q]")
        search.send_keys("JOB-000003")  # the oldest failed job, any letter case
        until(browser, lambda d: [r[0] for r in rows(d)] == ["job-000003"], "the search")
        assert browser.find_element(By.ID, "shown").text == "showing 1 of 1"

        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
        until(browser, lambda d: d.execute_script("return window.innerWidth") == 390, "a phone")
        assert sideways(browser) == 0
        browser.find_element(By.CSS_SELECTOR, "#jobs td.c-name").click()
        until(browser, lambda d: d.find_element(By.ID, "job-title").text == "job-000003", "job")
        until(browser, lambda d: "broke" in d.find_element(By.ID, "terminal").text, "its log")
        browser.execute_script("document.querySelector('#view-job details').open = true")
        assert sideways(browser) == 0
        browser.find_element(By.ID, "log-search").send_keys("broke")
        until(browser, lambda d: d.find_element(By.ID, "log-found").text == "1 of 1", "a match")
        link = browser.find_element(By.ID, "log-download")
        assert str(link.get_attribute("href")).endswith("/log?download=1")
