"""Writing on a connection the application holds inside its own transaction (`transaction=`
of Queue.add, Queue.add_bulk, FlowProducer.add; Job.complete_in): the backend's named
statements run there instead of on its pool, with no retry (a failed statement ends the
application's transaction, which the application retries whole).

Two drivers: asyncpg (its Connection, a pool's connection, SQLAlchemy's driver
connection), and psycopg 3's AsyncConnection, through a shim that runs psyq's `$n`
statements (placeholders translated once per statement text) and reads rows as asyncpg
gives them (jsonb as JSON text). Every refusal names the connection and is raised before
anything is written: a connection of another driver, not inside a transaction, or to
another database or server than the backend's, or with no layout in the backend's schema.
"""

from __future__ import annotations

import re
import sys
import weakref
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


FAILED = "its transaction failed: roll it back first"


class _Asyncpg(_Connected):
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        """asyncpg does not tell a failed transaction from an open one: the server refuses
        the statement (25P02), which is then the TransactionError psycopg's check gives."""
        try:
            rows: list[Row] = await self._conn.fetch(sql, *args)
        except asyncpg.InFailedSQLTransactionError as exc:
            raise TransactionError(self._conn, FAILED) from exc
        except asyncpg.PostgresError as exc:
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
                raise translate(_Fault(exc), self._url) from exc
            rows: list[Row] = await cursor.fetchall() if cursor.description else []
        return rows


def driver_for(transaction: object, url: str) -> Driver:
    """The driver of `transaction`, refused unless it is inside a transaction."""
    if isinstance(transaction, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        if transaction.is_closed():
            raise TransactionError(transaction, "the connection is closed")
        if not transaction.is_in_transaction():
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
        raise TransactionError(conn, FAILED)
    if not (now == status.INTRANS or (now == status.IDLE and not conn.autocommit)):
        raise TransactionError(conn, "the connection is not inside a transaction")


class Transactional(BullmqConnection):
    """The entry point: `_in_transaction(transaction)` gives the statements' runner on it.

    A connection is checked once (transactions.check: its database, its server, the
    layout there) and remembered while it lives (weakly, by the connection object: a
    reconnect is a new object, and an open connection cannot move to another database or
    server). Then a transactional add is the one statement of a plain add, on the
    application's connection: the statements name the layout's tables and functions
    qualified by the schema, and the layout's functions run with their own search_path
    (`SET search_path FROM CURRENT`), so the application's search_path is never read nor
    set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._home: Row | None = None  # the backend's database and server (identity)
        self._checked: weakref.WeakSet[object] = weakref.WeakSet()

    def _in_transaction(self, transaction: object) -> _Entering:
        """`async with` it: the backend's statements on `transaction`, refused
        (TransactionError, nothing written) when it reaches another database or server,
        or the layout is not there."""
        return _Entering(self, transaction)

    async def _enter(self, transaction: object) -> InTransaction:
        driver = driver_for(transaction, self.url)
        known = _underlying(transaction)
        if known not in self._checked:
            await self._check(driver, transaction)
            self._checked.add(known)
        return InTransaction(driver, self._q)

    async def _check(self, driver: Driver, transaction: object) -> None:
        """transactions.check on the application's connection, against the backend's
        identity, read anew when it differs (the pool may have reconnected to a restarted
        server)."""
        [here] = await driver.fetch(self._q["transactions.check"], self.settings.schema)
        for fresh in (False, True):
            home = await self._identity(fresh)
            same = (here["database"], here["started"]) == (home["database"], home["started"])
            if same:
                break
        if not (same and here["layout"]):
            raise TransactionError(transaction, _elsewhere(here, home, self))

    async def _identity(self, fresh: bool = False) -> Row:
        if self._home is None or fresh:
            [self._home] = await self._rows("transactions.identity")
        return self._home


class _Entering:
    """`Transactional._in_transaction`'s context: the check on entry, nothing to undo."""

    def __init__(self, backend: Transactional, transaction: object) -> None:
        self._backend = backend
        self._transaction = transaction

    async def __aenter__(self) -> InTransaction:
        return await self._backend._enter(self._transaction)

    async def __aexit__(self, *exc_info: object) -> None:
        return None


def _underlying(transaction: object) -> object:
    """The connection object a check is remembered by: an asyncpg pool's proxy is a new
    object at every acquire, the connection it hands out lives on (a new one after a
    reconnect)."""
    if isinstance(transaction, asyncpg.pool.PoolConnectionProxy):
        connection: object = transaction._con  # set while acquired (driver_for checked it)
        return connection
    return transaction


def _elsewhere(here: Row, home: Row, backend: BullmqConnection) -> str:
    """Why the connection is refused (the first difference)."""
    schema = backend.settings.schema
    if here["database"] != home["database"]:
        database, queues = here["database"], home["database"]
        return f"it is connected to database {database!r}, the queues are in {queues!r}"
    if here["started"] != home["started"]:
        return f"it is connected to another Postgres server than {backend.safe_url!r}"
    return f"database {here['database']!r} has no queue layout in schema {schema!r}"
