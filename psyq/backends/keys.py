"""Job keys between stores: each backend names a job `<prefix>:<queue>:<id>` (BullMQ's Redis
form, psyq's other stores) or `<queue>:<id>` (BullMQ's Postgres layout, no prefix), as its
`key_prefix` says (`BackendAdapter`). Export pages carry the form of their keys; an import
writes them in its own (a job moved Redis -> Postgres gets its parent key in Postgres's
form, and back)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["JobKeys", "convert_key", "rekey_page"]

P = TypeVar("P")


class JobKeys:
    """The job keys of a backend (a part of `BackendAdapter`)."""

    url: str

    @property
    def key_prefix(self) -> str | None:
        """The prefix of this store's job keys, `<prefix>:<queue>:<id>`: the URL's `prefix`,
        else BullMQ's `bull`. A backend whose layout names a job `<queue>:<id>` (BullMQ's
        Postgres layout) returns None. The one place a backend chooses its key form: the
        methods below, and the core, ask it."""
        values = parse_qs(urlsplit(self.url).query).get("prefix")
        return values[-1] if values else DEFAULT_PREFIX

    def queue_key(self, queue: str) -> str:
        """The queue as job keys name it: `<prefix>:<queue>`, or `<queue>` without a prefix
        (what BullMQ calls the queue's qualified name, and a `parent` option's `queue`)."""
        prefix = self.key_prefix
        return queue if prefix is None else f"{prefix}:{queue}"

    def job_key(self, queue: str, job_id: str) -> str:
        return f"{self.queue_key(queue)}:{job_id}"

    def split_job_key(self, key: str) -> tuple[str, str]:
        """(queue, id) of a job key in this store's form."""
        rest = key if self.key_prefix is None else key.split(":", 1)[1]
        queue, _, job_id = rest.partition(":")
        return queue, job_id

    def own_keys(self, page: P) -> P:
        """An export page with its job keys in this store's form (what an import writes)."""
        return rekey_page(page, self.key_prefix)


def convert_key(key: str, source: str | None, target: str | None) -> str:
    """A job key written with prefix `source` (None: `<queue>:<id>`) in the form of prefix
    `target`. Exact whatever the id holds: a prefix and a queue name hold no ':'."""
    if source == target:
        return key
    rest = key if source is None else key.split(":", 1)[1]
    return rest if target is None else f"{target}:{rest}"


def rekey_page(page: P, target: str | None) -> P:
    """An export page (`ExportPage`) with its job keys (records' `parent_key`, the keys of
    `deps`) in the form of prefix `target`."""
    source: str | None = getattr(page, "key_prefix")  # noqa: B009 - a generic page
    if source == target:
        return page

    def key(text: str) -> str:
        return convert_key(text, source, target)

    jobs = [
        replace(job, parent_key=key(job.parent_key)) if job.parent_key else job
        for job in getattr(page, "jobs")  # noqa: B009
    ]
    deps = {job_id: _rekey_links(links, key) for job_id, links in getattr(page, "deps").items()}  # noqa: B009
    return replace(page, jobs=jobs, deps=deps, key_prefix=target)  # type: ignore[type-var]


def _rekey_links(links: Mapping[str, Any], key: Callable[[str], str]) -> dict[str, Any]:
    """A parent's children links ({"pending": [keys], "processed": {key: value}, ...}) with
    every key passed through `key`."""
    result: dict[str, Any] = {}
    for kind, value in links.items():
        if isinstance(value, Mapping):
            result[kind] = {key(k): v for k, v in value.items()}
        else:
            result[kind] = [key(k) for k in value]
    return result
