"""The BullMQ-layout backend's connections: the pool, running named statements, the
layout's error codes, and the LISTEN connection.

Every statement runs on its own (one round trip, one implicit transaction): the layout's
functions make each transition atomic. A lost connection runs the statement again after
the shared reconnect backoff; a deadlock or serialization failure at once, counted in
psyq.rules.conflicts (logged once per burst).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg

from psyq.backends.base import BackendAdapter, ErrorCode, JobRecord, raise_for_code
from psyq.backends.postgres.config import PostgresSettings, parse_postgres_url
from psyq.backends.postgres.held import HeldConnection
from psyq.backends.postgres.listen import Listener
from psyq.backends.postgres.locks import Locks, Obliterating, finishing_locks
from psyq.backends.postgres.presence import Presence
from psyq.backends.postgres.retry import (
    CONFLICTS,
    CONNECTION_LOST,
    client_error,
    conflict_cause,
)
from psyq.backends.postgres.schema import Ledger, ensure_schema
from psyq.backends.postgres.statements import Statements, load_statements
from psyq.errors import (
    ConnectionError,
    GroupMaxSizeExceededError,
    InvalidDataError,
    PsyqError,
)
from psyq.rules.conflicts import conflicts
from psyq.rules.reconnect import Reconnect

__all__ = ["BullmqConnection", "LayoutCode", "to_record", "translate"]

T = TypeVar("T")

log = logging.getLogger("psyq.postgres")
# The SQLSTATE the layout's functions raise, with BullMQ's numeric code in DETAIL.
LAYOUT_ERROR = "BM001"
GROUP_FULL = "PQG01"  # sql/groups.sql psyq_group_admit: an add past a group's maxSize
FOREIGN_KEY_VIOLATION = "23503"
UNTRANSLATABLE_CHARACTER = "22P05"  # jsonb holds no NUL (\u0000)


class LayoutCode(Exception):
    """A layout function refused a transition with BullMQ's code (an ErrorCode value)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _state_of(row: Mapping[str, Any]) -> str:
    state: str = row["state"]
    if state == "delayed" and row["process_at_ms"] is None and row.get("psyq_group"):
        return "waiting"  # in its group's line (sql/groups.sql)
    return "prioritized" if state == "waiting" and row["priority"] > 0 else state


def to_record(queue: str, row: Mapping[str, Any]) -> JobRecord:
    """A `job` row as a JobRecord (jsonb columns arrive as JSON text). The parent's key is
    the layout's, `<queue>:<id>` (see `BullmqConnection.key_prefix`)."""
    parent_key = row["parent_key"]
    progress = row["progress"]
    stacktrace = row["stacktrace"]
    return JobRecord(
        id=row["id"],
        queue=queue,
        name=row["name"],
        data=row["data"],
        opts=json.loads(row["opts"]),
        timestamp=row["added_at_ms"],
        delay=row["delay_ms"],
        priority=row["priority"],
        progress=0 if progress is None else json.loads(progress),
        attempts_made=row["attempts_made"],
        attempts_started=row["attempts_started"],
        stalled_counter=row["stalled_count"],
        processed_on=row["processed_at_ms"],
        finished_on=row["finished_at_ms"],
        returnvalue=row["return_value"],
        failed_reason=row["failed_reason"],
        stacktrace=() if stacktrace is None else json.loads(stacktrace),
        parent_key=parent_key,
        processed_by=row["processed_by"],
        lock_token=row["lock_token"] if row["state"] == "active" else None,
        state=_state_of(row),
    )


class BullmqConnection(BackendAdapter):
    """Pool, statements and listener; the concern classes build on it."""

    kind = "postgres"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.settings: PostgresSettings = parse_postgres_url(url)
        self.settle_linger_ms = self.settings.settle_linger_ms
        self._q = load_statements(self.settings.schema)
        self._pool: asyncpg.Pool | None = None
        self._held = HeldConnection(self._connect_held)  # for calls one after another
        self._listener: Listener | None = None
        self._reconnect = Reconnect()
        self.ledger: Ledger | None = None
        self._presence: Presence | None = None  # named idle sessions Node lists (presence.py)

    # ------------------------------------------------------------------ lifecycle
    def _server_settings(self) -> dict[str, str]:
        return {
            "search_path": self.settings.schema,
            "application_name": self.settings.application_name,
        }

    async def _connect(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self.settings.dsn, server_settings=self._server_settings()
        )
        return conn

    async def open(self) -> None:
        try:
            conn = await self._connect()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise ConnectionError(self.url, str(exc) or type(exc).__name__) from exc
        try:
            self.ledger = await ensure_schema(conn, self.settings.schema)
        finally:
            await conn.close()
        self._pool = await asyncpg.create_pool(
            self.settings.dsn,
            min_size=self.settings.pool_min,
            max_size=self.settings.pool_max,
            command_timeout=self.settings.command_timeout,
            server_settings=self._server_settings(),
            reset=_keep_session,
            init=self._init_connection,
        )
        self._listener = Listener(self._connect)
        await self._listener.start()

    async def _init_connection(self, conn: asyncpg.Connection) -> None:
        """A new pool connection knows the layout's job state type before its first
        statement: asyncpg would otherwise introspect it (a recursive catalog query) on the
        first job row the connection reads, 11-19 ms on a fresh server process against 2-3
        ms for this lookup by name; a worker's first jobs wait for it on every connection
        its pool opens (bench/README.md, issue 19, "Add-to-start p99")."""
        # no such type (the schema dropped meanwhile): asyncpg introspects later, as before
        with contextlib.suppress(ValueError):
            await conn.set_type_codec(
                "job_state", schema=self.settings.schema, encoder=str, decoder=str, format="text"
            )

    async def _connect_held(self) -> asyncpg.Connection:
        """The held connection (held.py), set up as the pool's are."""
        conn: asyncpg.Connection = await asyncpg.connect(
            self.settings.dsn,
            command_timeout=self.settings.command_timeout,
            server_settings=self._server_settings(),
        )
        try:
            await self._init_connection(conn)
        except BaseException:  # cancelled (a closing worker) or failed: not left open
            conn.terminate()
            raise
        return conn

    async def close(self) -> None:
        await self._held.close()
        presence, self._presence = self._presence, None
        if presence is not None:
            await presence.close()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _sessions(self) -> Presence:
        """The named idle sessions this backend holds (workers', QueueEvents')."""
        if self._presence is None:
            self._presence = Presence(self._connect_named)
        return self._presence

    async def _connect_named(self, name: str) -> asyncpg.Connection:
        """A connection that runs nothing, named `name` in pg_stat_activity."""
        conn: asyncpg.Connection = await asyncpg.connect(
            self.settings.dsn, server_settings={"application_name": name}
        )
        return conn

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise PsyqError(f"the postgres backend {self.safe_url!r} is not open")
        return self._pool

    @property
    def listener(self) -> Listener:
        if self._listener is None:
            raise PsyqError(f"the postgres backend {self.safe_url!r} is not open")
        return self._listener

    # ------------------------------------------------------------------ running
    async def _rows(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run one named statement; retried after a lost connection or a deadlock. A layout
        refusal is raised as LayoutCode, any other server error as PsyqError."""

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            rows: list[asyncpg.Record] = await conn.fetch(self._q[name], *args)
            return rows

        return await self._on_connection(run)

    async def _rows_in_order(
        self, locks: Locks | Obliterating, name: str, *args: Any
    ) -> list[asyncpg.Record]:
        """As _rows, after taking `locks` in the global order (locks.py) in the same
        transaction, when the statement would take several; else as _rows."""
        if not locks.several:
            return await self._rows(name, *args)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            async with conn.transaction():
                await self._take_locks(conn, locks)
                rows: list[asyncpg.Record] = await conn.fetch(self._q[name], *args)
                return rows

        return await self._on_connection(run)

    async def _take_locks(self, conn: asyncpg.Connection, locks: Locks | Obliterating) -> None:
        """Take `locks` in the global order (locks.py) in the open transaction."""
        await conn.execute(self._q[locks.statement], *locks.args())

    async def _on_connection(
        self,
        run: Callable[[asyncpg.Connection], Awaitable[T]],
        after_loss: Callable[[asyncpg.Connection], Awaitable[object]] | None = None,
    ) -> T:
        """`run(conn)` on the held connection when free, else on a pool connection
        (held.py), run again whole after a lost connection or a deadlock (it must be one
        statement or one transaction). A fault of the call itself
        (asyncpg's InterfaceError on a connection that is still up) is raised at once.
        An attempt lost with its connection may have committed (only its reply lost):
        before running again, `after_loss(conn)` looks at what it left."""
        tries = self.settings.pool_max + 3
        lost = False
        for attempt in range(tries):
            await self._reconnect.wait()
            try:
                async with self._held.lease(self.pool, self.settings.command_timeout) as conn:
                    try:
                        if lost and after_loss is not None:
                            await after_loss(conn)
                        result = await run(conn)
                    except asyncpg.InterfaceError as exc:  # lost, or a fault of the call
                        raise client_error(exc, _gone(conn)) from exc
            except CONFLICTS as exc:  # lost to another transaction: again at once
                self._conflicted(attempt, tries, exc)
            except CONNECTION_LOST as exc:
                lost = True
                self._reconnect.failed()
                self._give_up_after(attempt, tries, exc)
            except asyncpg.PostgresError as exc:
                raise translate(exc, self.url) from exc
            except asyncpg.InterfaceError as exc:  # from the pool: closing or closed
                raise PsyqError(f"postgres backend {self.safe_url!r}: {exc}") from exc
            else:
                self._reconnect.succeeded()
                return result
        raise AssertionError("unreachable")

    def _conflicted(self, attempt: int, tries: int, exc: asyncpg.PostgresError) -> None:
        """Count (and, once per burst, log) a deadlock or serialization failure the
        statement is run again after; the last try raises it."""
        cause = conflict_cause(exc)
        if attempt == tries - 1:
            raise PsyqError(
                f"postgres backend {self.safe_url!r}: the call lost {tries} times in a row "
                f"to other transactions ({cause}): {exc}"
            ) from exc
        conflicts.record("postgres", cause, exc)

    def _give_up_after(self, attempt: int, tries: int, exc: BaseException) -> None:
        if attempt == tries - 1:
            raise ConnectionError(self.url, f"{type(exc).__name__}: {exc}") from exc
        log.warning("psyq: postgres call retried after %r", exc)

    async def _value(self, name: str, *args: Any) -> Any:
        rows = await self._rows(name, *args)
        return rows[0][0] if rows else None

    def _made_waiting(self, queue: str) -> None:
        """This process may have made jobs of `queue` waiting (added them, or put some back
        in line): its next take asks the server. FastPath keeps the idle mark this drops
        (transitions.py, move_to_active); here there is none."""

    async def _transition(
        self, name: str, queue: str, job_id: str, operation: str, *args: Any
    ) -> list[asyncpg.Record]:
        """Run a statement that moves job `job_id`; a refusal raises the psyq error of its
        code (missing job, lock, state)."""
        try:
            rows = await self._rows(name, *args)
        except LayoutCode as exc:
            raise_for_code(exc.code, queue, job_id, operation)
            raise PsyqError(str(exc)) from exc  # a code >= 0 is never raised
        self._made_waiting(queue)
        return rows

    async def _settle(
        self,
        name: str,
        queue: str,
        job_id: str,
        operation: str,
        *args: Any,
        trims: Iterable[str] = (),
        on: Statements | None = None,
    ) -> Sequence[Any]:
        """As _transition, for a worker settling a job it took: a job no longer active
        means its lock was lost (the layout says "not active", Redis "lock missing"). The
        layout's finishing functions take several locks: they are taken first, in the
        global order (locks.py); `trims`: the kinds of finished jobs the worker's options
        trim by count or age; `on`: where it runs (None: the pool; transaction.py)."""
        locks = finishing_locks(queue, [job_id], trims)
        try:
            rows = await (on or self)._rows_in_order(locks, name, *args)
        except LayoutCode as exc:
            raise settle_error(exc, queue, job_id, operation) from exc
        self._made_waiting(queue)  # a retry, a parent its child's end let go
        return rows

    async def _coded(self, name: str, queue: str, job_id: str, operation: str, *args: Any) -> int:
        """Run a statement whose value is a code (< 0: refused) and raise for it."""
        code = int(await self._value(name, *args) or 0)
        raise_for_code(code, queue, job_id, operation)
        self._made_waiting(queue)
        return code

    async def _fold(self, queue: str) -> None:
        """Move the finished counts psyq appended for the queue into the layout's metrics
        rows (sql/transitions.sql, fold_rows then fold), in one transaction."""

        async def run(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await conn.execute(self._q["transitions.fold_rows"], queue)
                await conn.fetchval(self._q["transitions.fold"], queue)

        await self._on_connection(run)

    async def _after_take(self, queue: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Called with the rows of jobs just taken (schedulers add their next run)."""

    async def now_ms(self) -> int:
        return int(await self._value("queries.now"))

    def _records(self, queue: str, rows: Sequence[Mapping[str, Any]]) -> list[JobRecord]:
        return [to_record(queue, row) for row in rows]

    @property
    def key_prefix(self) -> str | None:
        """None: psyq names jobs as the layout does, `<queue>:<id>` with no prefix (in
        parent keys, children values, dependencies, a failed parent's reason), as Node
        BullMQ 6 on Postgres names them; the schema, not a prefix, separates namespaces."""
        return None


def _gone(conn: asyncpg.Connection) -> bool:
    """Whether a pool connection is closed, or was taken from the call (a terminated
    connection goes back to the pool at once)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # released back to the pool under the call
        return True


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A connection goes back to the pool as it is: the backend's statements and the
    layout's functions change no session state (no SET, LISTEN, cursor or session advisory
    lock on pool connections), so asyncpg's reset query would be one more round trip per
    call for nothing. asyncpg still rolls back a transaction left open before this."""


def settle_error(exc: LayoutCode, queue: str, job_id: str, operation: str) -> PsyqError:
    """The psyq error of a worker's settle the layout refused: a job no longer active means
    its lock was lost (the layout says "not active", Redis "lock missing")."""
    code = ErrorCode.LOCK_MISSING if exc.code == ErrorCode.NOT_IN_STATE else exc.code
    try:
        raise_for_code(code, queue, job_id, operation)
    except PsyqError as error:
        return error
    return PsyqError(str(exc))


def translate(exc: asyncpg.PostgresError, url: str) -> Exception:
    """The psyq-side exception of a server error (LayoutCode for the layout's refusals)."""
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate == LAYOUT_ERROR:
        detail = getattr(exc, "detail", None) or "0"
        try:
            return LayoutCode(int(detail), str(exc))
        except ValueError:
            pass
    if sqlstate == GROUP_FULL:
        over = json.loads(getattr(exc, "detail", None) or "{}")
        return GroupMaxSizeExceededError(
            str(over.get("queue")), str(over.get("group")), int(over.get("maxSize") or 0)
        )
    if sqlstate == FOREIGN_KEY_VIOLATION and getattr(exc, "table_name", None) == "job_log":
        return LayoutCode(ErrorCode.JOB_MISSING, str(exc))  # a log row for a missing job
    if sqlstate == UNTRANSLATABLE_CHARACTER:  # NUL in JSON text that passed no gate (an import)
        return InvalidDataError(f"Postgres in {url!r} cannot store this value: {exc}")
    return PsyqError(f"postgres error in {url!r}: {exc}")
