"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server.

``playwright install`` cannot download browsers here; the Python package drives the system
Chromium (apt's ``chromium``, installed by ``.ci/run``). Without it these tests are skipped
with the reason — except under CI, where a missing browser is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("STEWARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def _chromium_present() -> bool:
    return Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is not None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module.

    Playwright's sync API keeps an asyncio loop running on this thread for as long as it is
    open, and Django refuses ORM calls under a running loop. The tests' ORM calls are plain
    synchronous ones, so the guard is lifted while the browser is open — module-scoped, so
    the loop and the variable are gone before any other module runs (a leaked variable would
    also fail ``check --deploy`` in later tests).
    """
    if not _chromium_present():
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the browser tests")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                yield launched
            finally:
                launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}, locale="en-GB"
    )
    opened = context.new_page()
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":  # CSP violations are reported here too
            problems.append(message.text)

    def on_response(response: Any) -> None:
        if response.status >= 400:
            problems.append(f"{response.status} {response.request.method} {response.url}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("response", on_response)
    opened.problems = problems
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def screenshot() -> Any:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
