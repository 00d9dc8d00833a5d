"""Writing on a connection the application holds inside its own transaction (`transaction=`
of Queue.add, Queue.add_bulk, FlowProducer.add; Job.complete_in): the backend's named
statements run there instead of on its pool, with no retry (a failed statement ends the
application's transaction, which the application retries whole).

Two drivers: asyncpg (its Connection, a pool's connection, SQLAlchemy's driver
connection), and psycopg 3's AsyncConnection, through a shim that runs psyq's `$n`
statements (placeholders translated once per statement text) and reads rows as asyncpg
gives them (jsonb as JSON text). Every refusal names the connection and is raised before
anything is written: a connection of another driver, not inside a transaction, or to
another database or server than the backend's.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import AsyncIterator
from functools import lru_cache
from typing import Any, Protocol

import asyncpg

from psyq.backends.postgres.connection import BullmqConnection, translate
from psyq.backends.postgres.locks import Locks, Obliterating
from psyq.backends.postgres.statements import Queries, Row
from psyq.errors import TransactionError

__all__ = [
    "Driver",
    "InTransaction",
    "Transactional",
    "driver_for",
    "psycopg_sql",
]


class Driver(Protocol):
    """Runs one statement on the application's connection; a server error comes out as
    psyq's (connection.translate)."""

    failed: bool  # a statement raised a server error: the transaction is aborted

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...


class InTransaction:
    """The backend's named statements on the application's open transaction: the global
    lock order (locks.py) is kept by taking a statement's locks first, as on the pool."""

    def __init__(self, driver: Driver, statements: Queries) -> None:
        self._driver = driver
        self._q = statements

    async def _rows(self, name: str, *args: Any) -> list[Row]:
        return await self._driver.fetch(self._q[name], *args)

    async def _rows_in_order(self, locks: Locks | Obliterating, name: str, *args: Any) -> list[Row]:
        if locks.several:
            await self._driver.fetch(self._q[locks.statement], *locks.args())
        return await self._rows(name, *args)


class _Connected:
    """A driver over the application's connection `conn`; errors name the backend `url`."""

    def __init__(self, conn: Any, url: str) -> None:
        self._conn = conn
        self._url = url
        self.failed = False


class _Asyncpg(_Connected):
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        try:
            rows: list[Row] = await self._conn.fetch(sql, *args)
        except asyncpg.PostgresError as exc:
            self.failed = True
            raise translate(exc, self._url) from exc
        return rows


class _Fault:
    """A psycopg server error seen as connection.translate reads an asyncpg one."""

    def __init__(self, exc: Any) -> None:
        self.sqlstate = exc.sqlstate
        self.detail = exc.diag.message_detail
        self.table_name = exc.diag.table_name
        self._text = str(exc)

    def __str__(self) -> str:
        return self._text


_PLACEHOLDER = re.compile(r"\$(\d+)")


@lru_cache(maxsize=256)
def psycopg_sql(sql: str) -> str:
    """psyq's `$n` statement as psycopg 3 takes it: `%(pn)s` (a parameter used twice stays
    one), a literal `%` doubled."""
    return _PLACEHOLDER.sub(r"%(p\1)s", sql.replace("%", "%%"))


class _Psycopg(_Connected):
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        from psycopg import Error
        from psycopg.rows import dict_row
        from psycopg.types.string import TextLoader

        params = {f"p{n}": value for n, value in enumerate(args, 1)}
        async with self._conn.cursor(row_factory=dict_row) as cursor:
            for json_type in ("json", "jsonb"):  # as asyncpg gives them: JSON text
                cursor.adapters.register_loader(json_type, TextLoader)
            try:
                await cursor.execute(psycopg_sql(sql), params)
            except Error as exc:
                self.failed = True
                raise translate(_Fault(exc), self._url) from exc
            rows: list[Row] = await cursor.fetchall() if cursor.description else []
        return rows


def driver_for(transaction: object, url: str) -> Driver:
    """The driver of `transaction`, refused unless it is inside a transaction."""
    if isinstance(transaction, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        if transaction.is_closed() or not transaction.is_in_transaction():
            raise TransactionError(transaction, "the connection is not inside a transaction")
        return _Asyncpg(transaction, url)
    psycopg = sys.modules.get("psycopg")  # loaded: the application made the connection
    if psycopg is not None and isinstance(transaction, psycopg.AsyncConnection):
        _check_psycopg(transaction, psycopg.pq.TransactionStatus)
        return _Psycopg(transaction, url)
    raise TransactionError(transaction, "not an asyncpg Connection or a psycopg 3 AsyncConnection")


def _check_psycopg(conn: Any, status: Any) -> None:
    """Inside a transaction: one open, or one the next statement opens (autocommit off)."""
    now = conn.info.transaction_status
    if conn.closed:
        raise TransactionError(conn, "the connection is closed")
    if now == status.INERROR:
        raise TransactionError(conn, "its transaction failed: roll it back first")
    if not (now == status.INTRANS or (now == status.IDLE and not conn.autocommit)):
        raise TransactionError(conn, "the connection is not inside a transaction")


class Transactional(BullmqConnection):
    """The entry point: `_in_transaction(transaction)` gives the statements' runner on it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._home: Row | None = None  # the backend's database and server (identity)

    @contextlib.asynccontextmanager
    async def _in_transaction(self, transaction: object) -> AsyncIterator[InTransaction]:
        """The backend's statements on `transaction`, refused (TransactionError, nothing
        written) when it reaches another database or server, or the layout is not there;
        its search_path is led by the layout's schema meanwhile."""
        driver = driver_for(transaction, self.url)
        here = await self._enter(driver)
        if here["switched"] is None:
            raise TransactionError(transaction, _elsewhere(here, await self._identity(), self))
        done = False
        try:
            yield InTransaction(driver, self._q)
            done = True
        finally:
            if done or not driver.failed:  # a failed statement ended the transaction
                await driver.fetch(self._q["transactions.leave"], here["search_path"])

    async def _enter(self, driver: Driver) -> Row:
        """transactions.enter, asked again with the identity read anew when it differs
        (the pool may have reconnected to a restarted server)."""
        for fresh in (False, True):
            home = await self._identity(fresh)
            args = (self.settings.schema, home["database"], home["started"])
            [here] = await driver.fetch(self._q["transactions.enter"], *args)
            if here["switched"] is not None or here["database"] != home["database"]:
                break
        return here

    async def _identity(self, fresh: bool = False) -> Row:
        if self._home is None or fresh:
            [self._home] = await self._rows("transactions.identity")
        return self._home


def _elsewhere(here: Row, home: Row, backend: BullmqConnection) -> str:
    """Why `transactions.enter` did not switch (the first difference)."""
    schema = backend.settings.schema
    if here["database"] != home["database"]:
        database, queues = here["database"], home["database"]
        return f"it is connected to database {database!r}, the queues are in {queues!r}"
    if here["started"] != home["started"]:
        return f"it is connected to another Postgres server than {backend.safe_url!r}"
    return f"database {here['database']!r} has no queue layout in schema {schema!r}"
