"""The built site in a real headless browser: the home page renders, a navigation link opens its page,
and the search box finds a page. Skips, saying why, where no Chromium and chromedriver are installed
(`apt-get install chromium chromium-driver`) or selenium is missing (the docs extra)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free one
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the test's output is the assertions
        pass


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the docs extra)")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no Chromium and chromedriver here (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow  # CI's slow stage runs after the docs extra (selenium) is installed
def test_pages_render_navigation_and_search_work(server: str, browser: Any) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 20)
    browser.get(server)
    assert "lm-verifier" in browser.title
    assert browser.find_element(By.TAG_NAME, "h1").text == "lm-verifier"

    # A navigation link: the sidebar's entry for the tutorial opens that page.
    link = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary a[href$='tutorial/']")
    browser.execute_script("arguments[0].click();", link)  # the sidebar may be collapsed at this width
    wait.until(ec.url_contains("/tutorial/"))
    assert "Tutorial" in browser.find_element(By.TAG_NAME, "h1").text

    # Search: the index is built in the browser (a web worker); a query lists matching pages.
    browser.find_element(By.CSS_SELECTOR, "label[for='__search']").click()
    box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    box.send_keys("streaming oracle")
    # The result list is re-rendered as each key arrives, so elements found once go stale (CI met a
    # StaleElementReferenceException): read the links' addresses in one script call, until one matches.
    links = "return Array.from(document.querySelectorAll('.md-search-result__link'), a => a.href);"
    found: list[str] = []

    def a_result_names_the_page(driver: Any) -> bool:
        found[:] = driver.execute_script(links)
        return any("streaming" in href for href in found)

    try:
        wait.until(a_result_names_the_page)
    except TimeoutException:
        pytest.fail(f"no search result for 'streaming oracle' links the streaming page; results: {found}")
