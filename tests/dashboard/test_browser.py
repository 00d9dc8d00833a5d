"""The dashboard's page in a real browser (headless Chromium driven by Playwright) against a
dashboard serving a real store over TCP: what a person sees and does, on every backend.
Screenshots of the main views go to build/screenshots/ (docs/dashboard.md shows them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import psyq
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.dashboard.browser import WAIT_MS, Site, browser, page, screenshot, site
from tests.queues import fill_queue

__all__ = ["browser", "page", "site"]  # the fixtures, imported for the tests below

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture says what to install
    expect = None

SHOWN_ON = "sqlite"  # the backend whose run saves the screenshots


@pytest.fixture(params=["sqlite", "redis", "postgres", "memory", "tcp"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


def parse_file(path: str) -> None:
    raise ValueError(
        f"""bad input in {path}
line 2: expected a number"""
    )


async def fail_for_real(url: str, name: str) -> str:
    """A job 'parse' that failed by raising in a processor's call stack (a real traceback)."""
    async with psyq.Queue(name, connection=url) as queue:
        job = await queue.add("parse", {"file": "x.csv"}, attempts=1)
        worker = psyq.Worker(name, None, connection=url, autorun=False)
        try:
            taken = await worker.get_next_job("t", block=False)
            assert taken is not None and taken.id == job.id
            try:
                parse_file(taken.data["file"])
            except ValueError as exc:
                await taken.move_to_failed(exc, "t")
        finally:
            await worker.close()
        return job.id


async def state_of(url: str, name: str, job_id: str) -> str:
    async with psyq.Queue(name, connection=url) as queue:
        return await queue.get_job_state(job_id)


def wait_until(check: Callable[[], Any], timeout: float = WAIT_MS / 1000) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not so within {timeout}s: {check!r}")
        time.sleep(0.05)


def tab_count(tab: Any, state: str) -> Any:
    return tab.locator(f'.tabs a[data-state="{state}"] .pill')


def test_a_walk_through_the_dashboard(url: str, site: Callable[..., Site], page: Any) -> None:
    """Queues, states, a job's error and data, retry and remove, and the live update when a
    worker completes jobs: on every backend."""
    name = fresh_name("page")
    dash = site(url)
    parse_id = dash.run(fail_for_real(url, name))
    ids = dash.run(fill_queue(url, name, bad_name="<script>x</script>"))
    shots = url.startswith("sqlite")

    page.goto(dash.base + "/")
    card = page.locator(f'.card[data-queue="{name}"]')
    expect(card).to_be_visible()
    if shots:
        screenshot(page, "overview")

    page.fill("#filter", name)
    expect(page.locator("#queues a")).to_have_count(1)
    page.click(f'#queues a[data-queue="{name}"]')
    expect(page.locator("h1")).to_have_text(name)
    expect(page.locator("#live")).to_have_attribute("data-live", "yes")
    for state, count in {"waiting": 2, "prioritized": 1, "delayed": 1, "failed": 2}.items():
        expect(tab_count(page, state)).to_have_text(str(count))

    page.click('.tabs a[data-state="failed"]')
    cards = page.locator(".jobs .job")
    expect(cards).to_have_count(2)
    bad = page.locator(f'.job[data-job="{ids["bad"]}"]')
    expect(bad.locator(".title a")).to_have_text("<script>x</script>")  # text, not markup
    expect(bad.locator(".reason")).to_have_text("boom")
    if shots:
        screenshot(page, "queue-failed")

    page.click(f'.job[data-job="{parse_id}"] .title a')
    stack = page.locator('pre[data-field="stacktrace"]')
    expect(stack).to_contain_text("Traceback (most recent call last):")
    trace = stack.inner_text()
    assert "\n" in trace and "\\n" not in trace  # real lines, not escapes
    assert "in parse_file" in trace and "line 2: expected a number" in trace.splitlines()
    expect(page.locator('[data-field="failed_reason"]')).to_contain_text("bad input in x.csv")
    if shots:
        screenshot(page, "job-error")
    page.click('.tabs a[data-tab="data"]')
    expect(page.locator('pre[data-json="data"]')).to_contain_text('"file": "x.csv"')
    page.click('.tabs a[data-tab="options"]')
    expect(page.locator('pre[data-json="opts"]')).to_contain_text('"attempts": 1')

    page.click('.toolbar [data-action="retry"]')
    expect(page.locator('[data-field="state"]')).to_have_text("Waiting")
    assert dash.run(state_of(url, name, parse_id)) == "waiting"

    page.goto(f"{dash.base}/#/q/{name}/job/{ids['bad']}/logs")
    expect(page.locator("ol.logs li")).to_have_text(["tried once"])

    page.goto(f"{dash.base}/#/q/{name}/waiting/0")
    expect(page.locator(".jobs .job")).to_have_count(3)  # a, b and the retried parse
    first = page.locator(".jobs .job").filter(has=page.get_by_role("link", name="a", exact=True))
    victim = first.get_attribute("data-job")
    first.locator('[data-action="remove"]').click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"Remove job {victim}")
    dialog.locator("#confirm-ok").click()
    expect(page.locator(f'.job[data-job="{victim}"]')).to_have_count(0)
    assert dash.run(state_of(url, name, str(victim))) == "unknown"

    # Live: a worker completes the remaining jobs; the page's counts follow, pushed by the
    # server (the view is not polled while its event stream is up).
    page.click('.tabs a[data-state="completed"]')
    expect(tab_count(page, "completed")).to_have_text("1")
    expect(page.locator("#live")).to_have_attribute("data-live", "yes")
    worker = dash.run(start_worker(url, name))
    try:
        expect(tab_count(page, "completed")).to_have_text("4")  # waiting, urgent, parse
        expect(page.locator(".jobs .job")).to_have_count(4)
        expect(page.locator("h2", has_text="Workers (1)")).to_be_visible()
        expect(page.locator('[data-chart="completed"] rect')).not_to_have_count(0)
        if shots:
            screenshot(page, "queue-live")
    finally:
        dash.run(worker.close())


async def start_worker(url: str, name: str) -> psyq.Worker:
    async def work(job: psyq.Job) -> Any:
        await job.update_progress(100)
        return {"done": job.name}

    worker = psyq.Worker(name, work, connection=url)
    return worker
