"""Event ids are numbered when written but seen when committed: a reader must not pass over
an event whose writer commits after a later-numbered one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg

import psyq
from psyq.backends.postgres import PostgresBackend

from .conftest import url_for

INSERT = "INSERT INTO event (queue, event, data, created_at_ms) VALUES ($1, $2, '{}', 0)"


async def test_an_event_committed_late_is_not_skipped(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    url = url_for(pg_server, schema)
    async with psyq.Queue("order", connection=url):
        pass  # creates the schema
    slow = await asyncpg.connect(pg_server)
    fast = await asyncpg.connect(pg_server)
    backend = PostgresBackend(url)
    await backend.open()
    try:
        for conn in (slow, fast):
            await conn.execute(f'SET search_path = "{schema}"')
        late = slow.transaction()
        await late.start()
        await slow.execute(INSERT, "order", "first")  # numbered first, not yet committed
        await fast.execute(INSERT, "order", "second")  # numbered second, committed
        read = asyncio.create_task(backend.read_events("order", "0", 100, 0))
        await asyncio.sleep(0.2)  # sleep: a while in which the read must hand nothing out
        assert not read.done(), "the read handed out events while an earlier one was open"
        await late.commit()
        events = await asyncio.wait_for(read, 5)
        assert [name for _, name, _ in events] == ["first", "second"]
        assert [int(event_id) for event_id, _, _ in events] == sorted(
            int(event_id) for event_id, _, _ in events
        )
    finally:
        await backend.close()
        await slow.close()
        await fast.close()
