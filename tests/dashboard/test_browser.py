"""The dashboard's page in a real browser (headless Chromium driven by Playwright) against a
dashboard serving a real store over TCP: what a person sees and does, on every backend.
Screenshots of the main views go to build/screenshots/ (docs/dashboard.md shows them)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import psyq
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.dashboard.browser import WAIT_MS, Site, browser, page, screenshot, site
from tests.polling import eventually_sync
from tests.queues import fill_queue

__all__ = ["browser", "page", "site"]  # the fixtures, imported for the tests below

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture says what to install
    expect = None

SHOWN_ON = "sqlite"  # the backend whose run saves the screenshots


@pytest.fixture(params=["sqlite", "redis", "postgres", "memory", "psyq"])
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


async def fill_others(url: str) -> None:
    """Two more queues, so the overview and the sidebar filter have something to sort."""
    for name, count in (("reports", 3), ("webhooks", 12)):
        async with psyq.Queue(name, connection=url) as queue:
            await queue.add_bulk([{"name": f"{name}-{i}", "data": {"i": i}} for i in range(count)])
    async with psyq.Queue("reports", connection=url) as queue:
        await queue.pause()


async def state_of(url: str, name: str, job_id: str) -> str:
    async with psyq.Queue(name, connection=url) as queue:
        return await queue.get_job_state(job_id)


def wait_until(check: Callable[[], Any], timeout: float = WAIT_MS / 1000) -> Any:
    return eventually_sync(check, timeout=timeout, interval=0.05)


def open_state(tab: Any, state: str) -> None:
    """Click a state's tab and wait until the page shows that state (its buttons are the
    state's own: "Clean failed" becomes "Clean completed")."""
    tab.click(f'.tabs a[data-state="{state}"]')
    current = tab.locator('.tabs a[aria-current="page"]')
    expect(current).to_have_attribute("data-state", state)


def tab_count(tab: Any, state: str) -> Any:
    return tab.locator(f'.tabs a[data-state="{state}"] .pill')


def test_a_walk_through_the_dashboard(url: str, site: Callable[..., Site], page: Any) -> None:
    """Queues, states, a job's error and data, retry and remove, and the live update when a
    worker completes jobs: on every backend."""
    shots = url.startswith("sqlite")  # a store of its own: readable names, screenshots
    name = "emails" if shots else fresh_name("page")
    dash = site(url)
    parse_id = dash.run(fail_for_real(url, name))
    ids = dash.run(fill_queue(url, name, bad_name="<script>x</script>"))
    if shots:
        dash.run(fill_others(url))

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

    open_state(page, "failed")
    cards = page.locator(".jobs .job")
    expect(cards).to_have_count(2)
    bad = page.locator(f'.job[data-job="{ids["bad"]}"]')
    expect(bad.locator(".title a")).to_have_text("<script>x</script>")  # text, not markup
    expect(bad.locator(".reason")).to_have_text("boom")
    # A card opens in place on its error (a traceback as text), then its data.
    parse_card = page.locator(f'.job[data-job="{parse_id}"]')
    parse_card.locator('[data-action="details"]').click()
    expect(parse_card.locator('pre[data-field="stacktrace"]')).to_contain_text("Traceback")
    if shots:
        screenshot(page, "queue-failed")
    parse_card.get_by_role("tab", name="Data").click()
    expect(parse_card.locator('pre[data-json="data"]')).to_contain_text('"file": "x.csv"')
    page.keyboard.press("ArrowRight")  # the tab keys move between a card's tabs
    expect(parse_card.get_by_role("tab", name="Options")).to_be_focused()
    expect(parse_card.locator('pre[data-json="opts"]')).to_contain_text('"attempts": 1')
    parse_card.locator('[data-action="details"]').click()
    expect(parse_card.locator(".details")).to_have_count(0)

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
    open_state(page, "completed")
    expect(tab_count(page, "completed")).to_have_text("1")
    expect(page.locator("#live")).to_have_attribute("data-live", "yes")
    worker = dash.run(start_worker(url, name))
    try:
        expect(tab_count(page, "completed")).to_have_text("4")  # waiting, urgent, parse
        expect(page.locator(".jobs .job")).to_have_count(4)
        expect(page.locator("h2", has_text="Workers (1)")).to_be_visible()
        expect(page.locator('[data-chart="completed"] h3')).to_contain_text("4 ·")
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


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/jobs.db?durability=durable"


async def make_flow(url: str, top: str, sub: str) -> dict[str, str]:
    """report (top) <- fetch (sub, completed), render (sub) <- font (top)."""
    async with psyq.FlowProducer(connection=url) as flows:
        root = await flows.add(
            {
                "name": "report",
                "queue_name": top,
                "children": [
                    {"name": "fetch", "queue_name": sub},
                    {
                        "name": "render",
                        "queue_name": sub,
                        "children": [{"name": "font", "queue_name": top}],
                    },
                ],
            }
        )
    worker = psyq.Worker(sub, None, connection=url, autorun=False)
    try:
        fetch = await worker.get_next_job("t", block=False)
        assert fetch is not None and fetch.name == "fetch"
        await fetch.move_to_completed("ok", "t")
    finally:
        await worker.close()
    return {
        "report": root.job.id,
        "fetch": root.children[0].job.id,
        "render": root.children[1].job.id,
        "font": root.children[1].children[0].job.id,
    }


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_a_flow_is_a_tree_across_queues(
    backend: str, request: pytest.FixtureRequest, site: Callable[..., Site], page: Any
) -> None:
    url = BACKENDS[backend](request)
    top, sub = ("reports", "renders") if backend == "sqlite" else (fresh_name("t"), fresh_name("s"))
    dash = site(url)
    ids = dash.run(make_flow(url, top, sub))
    page.goto(f"{dash.base}/#/q/{top}/job/{ids['font']}/flow")
    tree = page.locator('ul.tree[aria-label="flow"]')
    expect(tree.locator("li")).to_have_count(4)
    expected = {
        f"{top}:{ids['report']}": "Waiting children",
        f"{sub}:{ids['fetch']}": "Completed",
        f"{sub}:{ids['render']}": "Waiting children",
        f"{top}:{ids['font']}": "Waiting",
    }
    for node, state in expected.items():
        expect(tree.locator(f'li[data-node="{node}"] > .node .pill')).to_have_text(state)
    # The tree's shape: font under render under report; this job is marked.
    render = tree.locator(f'li[data-node="{sub}:{ids["render"]}"]')
    expect(render.locator(f'li[data-node="{top}:{ids["font"]}"]')).to_have_class("here")
    expect(page.locator(".facts")).to_contain_text(f"{sub} #{ids['render']}")  # the parent
    if backend == "sqlite":
        screenshot(page, "flow")
    tree.locator(f'li[data-node="{top}:{ids["report"]}"] > .node a').click()
    expect(page.locator("h1")).to_contain_text("report")


def test_pages_search_and_schedulers(sqlite_url: str, site: Callable[..., Site], page: Any) -> None:
    name = "emails"  # the store is a file of this test's own
    dash = site(sqlite_url)

    async def fill() -> list[str]:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            jobs = await queue.add_bulk(
                [{"name": f"{'sms' if i % 2 else 'mail'}-{i}"} for i in range(45)]
            )
            await queue.upsert_job_scheduler(
                "nightly", {"pattern": "0 3 * * *"}, {"name": "cleanup"}
            )
            return [job.id for job in jobs]

    ids = dash.run(fill())
    page.goto(f"{dash.base}/#/q/{name}/waiting/0")
    cards = page.locator(".jobs .job")
    expect(cards).to_have_count(20)
    expect(cards.first).to_have_attribute("data-job", ids[-1])  # newest first
    pager = page.locator(".pager")
    expect(pager).to_contain_text("1\N{EN DASH}20 of 45 · page 1 of 3")
    pager.locator('a[rel="next"]').click()
    expect(pager).to_contain_text("21\N{EN DASH}40 of 45 · page 2 of 3")
    pager.locator('a[rel="next"]').click()
    expect(cards).to_have_count(5)
    expect(pager).to_contain_text("41\N{EN DASH}45 of 45")
    expect(pager.locator('a[rel="next"]')).to_have_count(0)
    pager.locator('a[rel="prev"]').click()
    expect(pager).to_contain_text("page 2 of 3")

    page.fill("#job-search", "SMS")
    page.press("#job-search", "Enter")
    expect(pager).to_contain_text("1\N{EN DASH}20 of 22")
    expect(pager).to_contain_text("name contains “SMS”")
    names = cards.locator(".title a").all_inner_texts()
    assert len(names) == 20 and all(n.startswith("sms-") for n in names)
    screenshot(page, "search")
    page.fill("#job-search", ids[7])
    page.press("#job-search", "Enter")
    expect(page.locator("h1")).to_contain_text("sms-7")

    page.goto(f"{dash.base}/#/q/{name}/waiting/0")
    schedulers = page.locator('table[aria-label="job schedulers"] tbody tr')
    expect(schedulers).to_have_count(1)
    expect(schedulers).to_contain_text("nightly")
    expect(schedulers).to_contain_text("cron 0 3 * * *")
    expect(schedulers.locator("time")).to_contain_text(re.compile(r"^in \d+"))


def test_groups_are_shown_and_paused(sqlite_url: str, site: Callable[..., Site], page: Any) -> None:
    name = "tenants"
    dash = site(sqlite_url)

    async def fill() -> None:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            await queue.add_bulk([{"name": "j", "opts": {"group": {"id": g}}} for g in "abb"])

    dash.run(fill())
    page.goto(f"{dash.base}/#/q/{name}/waiting/0")
    rows = page.locator('table[aria-label="groups"] tbody tr')
    expect(page.locator("h2", has_text="Groups (2)")).to_be_visible()
    expect(rows).to_have_count(2)
    expect(rows.nth(1)).to_contain_text("b")
    expect(rows.nth(1)).to_contain_text("waiting")
    rows.nth(1).locator('[data-action="group-pause-b"]').click()
    expect(rows.nth(1)).to_contain_text("paused")
    expect(rows.nth(1).locator('[data-action="group-resume-b"]')).to_be_visible()

    async def paused() -> dict[str, str]:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            return {g["id"]: g["status"] for g in await queue.get_groups()}

    assert dash.run(paused()) == {"a": "waiting", "b": "paused"}


def test_queue_actions_ask_first(sqlite_url: str, site: Callable[..., Site], page: Any) -> None:
    """Destructive and mass actions wait for a confirmation; Cancel and Escape do nothing."""
    name = "emails"  # the store is a file of this test's own
    dash = site(sqlite_url)
    ids = dash.run(fill_queue(sqlite_url, name))

    async def counts() -> dict[str, int]:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            return await queue.get_job_counts("failed", "completed", "delayed", "waiting")

    dialog = page.locator("dialog#confirm")
    page.goto(f"{dash.base}/#/q/{name}/failed/0")
    page.click('[data-action="retry-all"]')
    expect(dialog).to_contain_text("Retry every failed job")
    screenshot(page, "confirm")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert dash.run(counts())["failed"] == 1
    page.click('[data-action="retry-all"]')
    dialog.locator("#confirm-ok").click()
    expect(page.locator("#notice")).to_have_text("Retried 1 job")
    assert dash.run(counts())["failed"] == 0
    expect(tab_count(page, "failed")).to_have_text("0")

    open_state(page, "completed")
    page.click('[data-action="clean"]')
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert dash.run(counts())["completed"] == 1
    page.click('[data-action="clean"]')
    dialog.locator("#confirm-ok").click()
    expect(tab_count(page, "completed")).to_have_text("0")
    assert dash.run(counts())["completed"] == 0

    open_state(page, "delayed")
    page.click(f'.job[data-job="{ids["later"]}"] [data-action="promote"]')
    expect(tab_count(page, "delayed")).to_have_text("0")
    assert dash.run(counts())["delayed"] == 0

    page.click('[data-action="pause"]')
    expect(page.locator(".head .badge")).to_have_text("paused")
    assert dash.run(is_paused(sqlite_url, name)) is True
    page.click('[data-action="resume"]')
    expect(page.locator(".head .badge")).to_have_count(0)
    assert dash.run(is_paused(sqlite_url, name)) is False


async def is_paused(url: str, name: str) -> bool:
    async with psyq.Queue(name, connection=url) as queue:
        return await queue.is_paused()


def test_read_only_and_token(sqlite_url: str, site: Callable[..., Site], page: Any) -> None:
    name = "emails"  # the store is a file of this test's own
    reader = site(sqlite_url, read_only=True)
    reader.run(fill_queue(sqlite_url, name))
    page.goto(f"{reader.base}/#/q/{name}/failed/0")
    expect(page.locator("#mode")).to_be_visible()
    buttons = page.locator('[data-action]:not([data-action="details"])')
    expect(buttons.first).to_be_visible()
    assert buttons.count() >= 3
    for i in range(buttons.count()):
        expect(buttons.nth(i)).to_be_disabled()
    page.click('[data-action="details"]')  # reading is not acting
    expect(page.locator(".job .details")).to_contain_text("boom")

    guarded = site(sqlite_url, token="s3cret")
    page.goto(f"{guarded.base}/#/q/{name}/failed/0")
    expect(page.locator("#error")).to_contain_text("token")
    page.goto(f"{guarded.base}/?token=s3cret#/q/{name}/failed/0")
    expect(page.locator("h1")).to_have_text(name)
    assert "token" not in page.url  # taken out of the address bar (and history)
    expect(page.locator("#live")).to_have_attribute("data-live", "yes")  # the stream has it too


def test_without_the_stream_the_page_polls(
    sqlite_url: str, site: Callable[..., Site], page: Any
) -> None:
    name = "emails"  # the store is a file of this test's own
    dash = site(sqlite_url)
    dash.run(fill_queue(sqlite_url, name))
    page.route("**/events", lambda route: route.abort())
    page.goto(f"{dash.base}/#/q/{name}/waiting/0")
    expect(page.locator("#live")).to_have_text("polling every 3 s")
    expect(tab_count(page, "waiting")).to_have_text("2")

    async def add() -> None:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            await queue.add("late", None)

    dash.run(add())
    expect(tab_count(page, "waiting")).to_have_text("3")


def test_a_phone_and_a_keyboard(
    sqlite_url: str, site: Callable[..., Site], browser: Any, page: Any
) -> None:
    name = "emails"  # the store is a file of this test's own
    dash = site(sqlite_url)
    ids = dash.run(fill_queue(sqlite_url, name, bad_name="a-rather-long-job-name-" * 4))

    # The keyboard alone: "/" finds the queue filter, Tab reaches the queue, Enter opens it,
    # Tab reaches Pause; Remove asks first and Enter on the dialog's default cancels.
    page.goto(dash.base + "/")
    expect(page.locator(".cards")).to_be_visible()
    page.keyboard.press("/")
    expect(page.locator("#filter")).to_be_focused()
    page.keyboard.type(name)
    page.keyboard.press("Tab")
    expect(page.locator(f'#queues a[data-queue="{name}"]')).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("h1")).to_have_text(name)
    tab_to(page, '[data-action="pause"]')
    page.keyboard.press("Enter")
    expect(page.locator(".head .badge")).to_have_text("paused")
    assert dash.run(is_paused(sqlite_url, name))
    page.goto(f"{dash.base}/#/q/{name}/failed/0")
    tab_to(page, f'.job[data-job="{ids["bad"]}"] [data-action="remove"]')
    page.keyboard.press("Enter")
    expect(page.locator("dialog#confirm")).to_be_visible()
    page.keyboard.press("Enter")  # the focused button is Cancel
    expect(page.locator("dialog#confirm")).to_be_hidden()
    assert dash.run(state_of(sqlite_url, name, ids["bad"])) == "failed"

    # A phone: the queue list folds behind a button; nothing is wider than the screen.
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        tab = phone.new_page()
        tab.set_default_timeout(WAIT_MS)
        tab.goto(dash.base + "/")
        expect(tab.locator("#sidebar")).to_be_hidden()
        tab.click("#menu")
        tab.click(f'#queues a[data-queue="{name}"]')
        expect(tab.locator("h1")).to_have_text(name)
        expect(tab.locator("#sidebar")).to_be_hidden()
        open_state(tab, "failed")
        expect(tab.locator(".jobs .job")).to_have_count(1)
        assert fits(tab)
        screenshot(tab, "phone-queue")
        tab.click(f'.job[data-job="{ids["bad"]}"] .title a')
        expect(tab.locator('[data-field="failed_reason"]')).to_have_text("boom")
        assert fits(tab)
        screenshot(tab, "phone-job")
    finally:
        phone.close()


def tab_to(tab: Any, selector: str, presses: int = 60) -> None:
    """Press Tab until `selector` has the focus (fails after `presses`)."""
    target = tab.locator(selector)
    expect(target).to_be_visible()
    for _ in range(presses):
        tab.keyboard.press("Tab")
        if target.evaluate("node => node === document.activeElement"):
            return
    pytest.fail(f"{selector} never got the focus in {presses} Tab presses")


def fits(tab: Any) -> bool:
    return bool(tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_odd_queue_names_and_job_ids(sqlite_url: str, site: Callable[..., Site], page: Any) -> None:
    """Names and ids are user input: slashes, spaces, '%', '#', '?' and accents travel
    through the address bar and the API intact."""
    name, job_id = "été/100% #1?", "order/42?x=1#top"
    dash = site(sqlite_url)

    async def fill() -> None:
        async with psyq.Queue(name, connection=sqlite_url) as queue:
            await queue.add("ship <now>", {"to": "Zoë"}, job_id=job_id)

    dash.run(fill())
    page.goto(dash.base + "/")
    page.click(f'.card[data-queue="{name}"] h3 a')
    expect(page.locator("h1")).to_have_text(name)
    open_state(page, "waiting")
    page.click(f'.job[data-job="{job_id}"] .title a')
    expect(page.locator("h1")).to_contain_text("ship <now>")
    expect(page.locator('pre[data-json="data"]')).to_contain_text('"to": "Zoë"')
    page.reload()  # the address alone leads back here
    expect(page.locator('pre[data-json="data"]')).to_contain_text('"to": "Zoë"')
    page.fill("#filter", "100%")
    expect(page.locator("#queues a")).to_have_count(1)
