"""Which errors a statement is run again after (one place for the rule)."""

from __future__ import annotations

import asyncpg

from psyq.errors import PsyqError

__all__ = [
    "CONFLICTS",
    "CONNECTION_LOST",
    "SESSION_LOST",
    "LostInFlight",
    "client_error",
    "conflict_cause",
]

# A transaction that lost to another one: run it again at once.
CONFLICTS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)


def conflict_cause(exc: BaseException) -> str:
    """The name a conflict is counted under (psyq.rules.conflicts)."""
    return "deadlock" if isinstance(exc, asyncpg.DeadlockDetectedError) else "serialization"


class LostInFlight(Exception):
    """asyncpg's InterfaceError on a connection that is now closed: the connection went
    away under the call (asyncpg says "connection is closed"), so the call is retried."""


# The server or the connection went away (a restart, a killed session): run it again after
# the backend's shared reconnect backoff. asyncpg's InterfaceError is not here: asyncpg
# raises it for a fault in the call itself too (a wrong number of query arguments, a value
# its codec refuses, a released connection used), which no retry mends; only one on a
# connection found closed is a lost connection (`client_error`).
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, e.g. the connection does not exist
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,  # the server is starting up or shutting down
    asyncpg.TooManyConnectionsError,
    asyncpg.InternalClientError,  # a connection left mid-operation by a kill
    LostInFlight,
    OSError,
    TimeoutError,  # a statement past command_timeout, or no pool connection in time
)

# A connection the backend holds of its own (the LISTEN connection, a named idle session) is
# opened again after any of these: a loss as above (asyncpg's InternalClientError included:
# a session killed while idle leaves its connection mid-operation for a moment, and the
# LISTEN sent on it then fails so), or any server or client error on the way.
SESSION_LOST = (*CONNECTION_LOST, asyncpg.PostgresError, asyncpg.InterfaceError)


def client_error(exc: asyncpg.InterfaceError, connection_closed: bool) -> Exception:
    """What asyncpg's InterfaceError raised by a call on a connection means: LostInFlight
    (retried) when that connection is now closed, else the fault of the call itself,
    raised at once: psyq's PsyqError naming it."""
    if connection_closed:
        return LostInFlight(f"{type(exc).__name__}: {exc}")
    return PsyqError(
        f"the postgres client refused the call ({type(exc).__name__}: {exc}); "
        "the connection is up, so it is not retried"
    )
