"""Queue metadata that stores export alike (`get_queue_meta`, for `psyq migrate`)."""

from __future__ import annotations

from typing import Any

from psyq.backends.base import BackendAdapter

__all__ = ["exported_schedulers"]


async def exported_schedulers(backend: BackendAdapter, queue: str) -> dict[str, Any]:
    """The `schedulers` of `get_queue_meta`, read through `get_job_schedulers`: {id: spec
    with "template": [name, data, opts, None] and "pending": the pending run's id}."""
    found: dict[str, Any] = {}
    for entry in await backend.get_job_schedulers(queue, 0, -1, True):
        spec = {k: v for k, v in entry.items() if k not in ("key", "name", "template")}
        template = entry["template"]
        spec["template"] = [entry["name"], template["data"], template["opts"], None]
        nxt = entry["next"]
        spec["pending"] = None if nxt is None else f"repeat:{entry['key']}:{nxt}"
        found[entry["key"]] = spec
    return found
