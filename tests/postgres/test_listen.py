"""The LISTEN connection comes back after any way a killed connection fails, and closes
cleanly after it.

A session killed (pg_terminate_backend) while idle leaves asyncpg's connection, for a moment,
mid-operation: the server's FATAL error was read, its closing not yet. A LISTEN sent on it
then fails with asyncpg's InternalClientError ("cannot switch to state 12; another operation
(2) is in progress"), seen in tests/postgres/test_faults.py under uvloop. The reconnect must
go on after it (the backend's calls are retried after it too, retry.py)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from psyq.backends.postgres.listen import JOBS_CHANNEL, Listener
from tests.conftest import fresh_name
from tests.polling import eventually


async def test_a_reconnect_that_finds_its_connection_mid_operation_tries_again(
    pg_server: str, admin: asyncpg.Connection
) -> None:
    app = f"psyq_listen_{uuid.uuid4().hex[:8]}"
    attempts = 0

    async def connect() -> asyncpg.Connection:
        nonlocal attempts
        attempts += 1
        if attempts == 2:  # the first reconnect: its connection was killed as it listened
            raise asyncpg.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        conn: asyncpg.Connection = await asyncpg.connect(
            pg_server, server_settings={"application_name": app}
        )
        return conn

    listener = Listener(connect)
    await listener.start()
    try:
        query = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1"
        assert [row[0] for row in await admin.fetch(query, app)] == [True]
        await eventually(  # lost, then opened again
            lambda: listener._conn is not None and attempts >= 3, "listening again, 3 attempts on"
        )
        queue = fresh_name()
        woken = listener.register(JOBS_CHANNEL, queue)
        await admin.execute("SELECT pg_notify($1, $2)", JOBS_CHANNEL, queue)
        await asyncio.wait_for(woken, 10)  # it listens again
    finally:
        await listener.close()  # and closes without raising
    assert attempts == 3
