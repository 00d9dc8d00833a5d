"""Which server errors a statement is run again after (one place for the rule)."""

from __future__ import annotations

import asyncpg

__all__ = ["CONFLICTS", "CONNECTION_LOST"]

# A transaction that lost to another one: run it again at once.
CONFLICTS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
# The server or the connection went away (a restart, a killed session): run it again after
# the backend's shared reconnect backoff.
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, e.g. the connection does not exist
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,  # the server is starting up or shutting down
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection left mid-operation by a kill
    OSError,
    TimeoutError,  # a statement past command_timeout, or no pool connection in time
)
