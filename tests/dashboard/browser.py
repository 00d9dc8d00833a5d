"""Fixtures for the dashboard's browser tests: one headless Chromium (Debian's `chromium`
package, driven by Playwright's Python client) per test run, and a real dashboard served
over TCP from a thread of its own, reading a real store.

The tests are plain functions (Playwright's sync API runs its own event loop); whatever they
do to the store (fill a queue, run a worker) runs on the dashboard's loop through
`Site.run`, so even memory:// is the store the page shows.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from psyq.dashboard.store import Store
from psyq.dashboard.web import create_app
from tests.conformance.conftest import system_deps_required
from tests.dashboard.conftest import FAILED

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 10_000  # what a test waits at most for the page to show something


def _missing(reason: str) -> NoReturn:
    """Skip, naming what is missing (`make test` installs the browser where it can); fail
    instead where PSYQ_REQUIRE_SERVICES=1 (CI)."""
    if system_deps_required():
        pytest.fail(f"{reason}; PSYQ_REQUIRE_SERVICES=1 requires it")
    pytest.skip(reason)


def chromium_path() -> str:
    found = os.environ.get("PSYQ_TEST_CHROMIUM") or shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        _missing(
            "the dashboard's browser tests need Chromium: apt-get install chromium (`make "
            "test` does as root), or set PSYQ_TEST_CHROMIUM to a Chromium binary"
        )
    return str(found)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the browser tests (they all live in test_browser.py). Module-scoped,
    not session-scoped: Playwright's sync API holds the thread's event loop while it runs,
    and the async tests of later modules need it back."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the dashboard's browser tests need Playwright: pip install 'psyq[test]'")
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    except Exception as exc:
        playwright.stop()
        _missing(f"Chromium at {executable} does not start under Playwright: {exc}")
    try:
        yield chromium
    finally:
        chromium.close()
        playwright.stop()


class Site:
    """A dashboard for `url` listening on 127.0.0.1 (a free port), served by a thread."""

    def __init__(self, url: str, read_only: bool = False, token: str | None = None) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._app = create_app(Store(url), read_only=read_only, token=token)
        self._runner: Any = None
        self.base = self.run(self._start())

    async def _start(self) -> str:
        from aiohttp import web

        self._runner = web.AppRunner(self._app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        """Run `coro` on the dashboard's loop; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Start `coro` on the dashboard's loop without waiting (a concurrent future)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        try:
            if self._runner is not None:
                self.run(self._runner.cleanup())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


@pytest.fixture
def site() -> Iterator[Callable[..., Site]]:
    """site(url, read_only=False, token=None) -> a running Site (closed after the test)."""
    sites: list[Site] = []

    def start(url: str, **options: Any) -> Site:
        sites.append(Site(url, **options))
        return sites[-1]

    try:
        yield start
    finally:
        for one in sites:
            one.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser tab (its own context) that may load nothing but 127.0.0.1: a request
    elsewhere (a CDN, a font) is refused and fails the test. Script errors fail it too."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    outside: list[str] = []
    errors: list[str] = []

    def route(request_route: Any) -> None:
        if request_route.request.url.startswith("http://127.0.0.1:"):
            request_route.continue_()
        else:
            outside.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
        if request.node.stash.get(FAILED, False):  # what the page showed when it failed
            screenshot(tab, f"failed-{request.node.name}")
    finally:
        context.close()
    assert outside == [], f"the page tried to load from elsewhere: {outside}"
    assert errors == [], f"the page's script failed: {errors}"


def screenshot(tab: Any, name: str) -> None:
    """Save what the tab shows as build/screenshots/<name>.png (CI keeps that folder)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.evaluate("window.scrollTo(0, 0)")  # the sticky header at the top, where it belongs
    tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
