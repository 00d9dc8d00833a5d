"""A queue holding a job in each common state, for tests of tools that show queues."""

from __future__ import annotations

import psyq

# The counts per state (in STATE_ORDER) of a queue fill_queue made.
FILLED_COUNTS = {
    "waiting": 2,
    "paused": 0,
    "prioritized": 1,
    "delayed": 1,
    "active": 0,
    "waiting-children": 0,
    "completed": 1,
    "failed": 1,
}


async def fill_queue(url: str, name: str, bad_name: str = "bad") -> dict[str, str]:
    """Two waiting jobs (a, b), one delayed (later), one prioritized (urgent), one completed
    (done, returned {"ok": 1}) and one failed (`bad_name`, data {"x": "<b>"}, reason "boom",
    one log line "tried once"). Returns the ids of done, bad, later and urgent."""
    async with psyq.Queue(name, connection=url) as queue:
        done, bad, *_ = await queue.add_bulk(
            [
                {"name": "done"},
                {"name": bad_name, "data": {"x": "<b>"}},
                {"name": "a"},
                {"name": "b"},
            ]
        )
        later = await queue.add("later", None, delay=600_000)
        urgent = await queue.add("urgent", None, priority=2)
        worker = psyq.Worker(name, None, connection=url, autorun=False)
        try:
            taken = await worker.get_next_job("t1", block=False)
            assert taken is not None and taken.id == done.id
            await taken.move_to_completed({"ok": 1}, "t1")
            taken = await worker.get_next_job("t2", block=False)
            assert taken is not None and taken.id == bad.id
            await taken.log("tried once")
            await taken.move_to_failed(RuntimeError("boom"), "t2")
        finally:
            await worker.close()
    return {"done": done.id, "bad": bad.id, "later": later.id, "urgent": urgent.id}
