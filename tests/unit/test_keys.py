"""Job keys between the two forms: `<prefix>:<queue>:<id>` (BullMQ's Redis form) and
`<queue>:<id>` (BullMQ 6's Postgres layout)."""

from __future__ import annotations

import pytest

from psyq.backends.base import ExportPage, JobRecord
from psyq.backends.engine import MemoryBackend
from psyq.backends.keys import convert_key, rekey_page


@pytest.mark.parametrize(
    ("key", "source", "target", "converted"),
    [
        ("bull:q:7", "bull", None, "q:7"),
        ("q:7", None, "bull", "bull:q:7"),
        ("bull:q:7", "bull", "copy", "copy:q:7"),
        ("q:7", None, None, "q:7"),
        # a scheduler's run has ':' in its id: the form, not the key, says where it starts
        ("bull:q:repeat:tick:1700000000000", "bull", None, "q:repeat:tick:1700000000000"),
        ("q:repeat:tick:1700000000000", None, "bull", "bull:q:repeat:tick:1700000000000"),
    ],
)
def test_convert_key(key: str, source: str | None, target: str | None, converted: str) -> None:
    assert convert_key(key, source, target) == converted


def test_a_page_is_rekeyed_whole() -> None:
    child = JobRecord(id="c", queue="kids", name="n", data="1", opts={}, timestamp=1)
    child.parent_key = "bull:tops:p"
    page = ExportPage(
        [child],
        {},
        None,
        deps={"p": {"pending": ["bull:kids:c"], "processed": {"bull:kids:d": "2"}}},
    )
    moved = rekey_page(page, None)
    assert moved.key_prefix is None and moved.jobs[0].parent_key == "tops:p"
    assert moved.deps == {"p": {"pending": ["kids:c"], "processed": {"kids:d": "2"}}}
    assert page.jobs[0].parent_key == "bull:tops:p"  # the given page is left as it was
    assert rekey_page(moved, None) is moved


def test_a_backend_names_jobs_in_one_form() -> None:
    backend = MemoryBackend("memory://?prefix=app")
    assert backend.key_prefix == "app"
    assert backend.queue_key("q") == "app:q" and backend.job_key("q", "7") == "app:q:7"
    assert backend.split_job_key("app:q:repeat:t:1") == ("q", "repeat:t:1")
