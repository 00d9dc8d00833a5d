"""The psyq wire protocol, shared by `psyq server` and the `psyq://` client.

Frames: a 4-byte big-endian length, then a MessagePack map of that many bytes.

    request   {"id": int, "op": str, "args": [...]}      op: "hello", "cancel" or an adapter
                                                          method of `COMMANDS`
    answer    {"id": int, "ok": value} | {"id": int, "err": <ext error>}

The first request of a connection is `hello` with args [version, token or None]; the server
answers {"server": "psyq", "version": version} when it speaks that version
(`SUPPORTED_VERSIONS`), else an error, and then closes. Version 2 adds `add_batch`, version 3
`add`, one job without options in its shortest form (server/adding.py), version 4 `bye` (below),
version 5 `check_ready` (whether the server's store can take changes: its readiness),
`wait_committed` and `remove_rate_limit_key` (an older server answers those two with its
unknown-command error, so a caller relying on them fails rather than going on), version 6
an `add` that carries its one job's options (server/adding.py); a client
that finds an older server tries the next older version, down to 1. Requests are
pipelined: many may be in flight on one connection and answers come in any order, matched by
id. `cancel` (args [id]) stops a blocked request (wait_for_job, read_events) and is not
answered. A blocked request is answered the moment the engine wakes it: nothing polls.

A server that goes away cleanly (the owner of a `sqlite:///` file handing it over) first
says so to a version 4 client with the frame {"id": 0, "bye": true}. The client then sends
nothing more on that connection and half-closes it (EOF); the server runs and answers every
request it read until that EOF (a blocked one at once, as on its timeout), then closes. So
no request is left with an unknown outcome. An older client is not told: the server reads
nothing more from it and answers what it read.

Values are plain MessagePack; the contract's dataclasses and psyq errors travel as ext types
(`fields.SPECS`) whose payload is the packed list of their fields, checked field by field
on decode. Never pickle.

This module holds the protocol's words: versions, limits, the frame header, the commands
and its error; the commands themselves are generated from the contract (generated.py).
The rest lies beside it: `fields.py` how each record travels (ext codes, fields, checks),
`codec.py` packing and unpacking messages, `framing.py` splitting received bytes into
frames, `outbox.py` batching the frames to write.
"""

from __future__ import annotations

import struct

from psyq.backends.server.generated import COMMANDS
from psyq.errors import PsyqError

__all__ = [
    "ADD_WITH_OPTIONS",
    "BLOCKING_COMMANDS",
    "BYE",
    "COMMANDS",
    "DEFAULT_PORT",
    "EARLY_ANSWERS",
    "HEADER",
    "MAX_FRAME_BYTES",
    "MAX_HELLO_FRAME",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "ProtocolError",
]

# 2: add_batch, 3: add (server/adding.py), 4: bye, 5: check_ready, wait_committed and
# remove_rate_limit_key, 6: add with options; a server speaks all below
PROTOCOL_VERSION = 6
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5, 6)
ADD_WITH_OPTIONS = 6  # the first version whose `add` may carry the job's options
DEFAULT_PORT = 6789
MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_HELLO_FRAME = 16 * 1024  # the largest frame before a connection's hello is accepted
HEADER = struct.Struct(">I")  # a frame's length, before its body

# The adapter methods a client may call (`COMMANDS`) are generated from the contract
# (generated.py): the import above.

# Requests that block until the engine wakes them; a client may cancel them.
BLOCKING_COMMANDS = frozenset({"wait_for_job", "read_events"})
# What a blocked request is answered when the server goes away (its timeout's answer).
EARLY_ANSWERS: dict[str, object] = {"wait_for_job": None, "read_events": []}
BYE = {"id": 0, "bye": True}  # the server goes away (version 4)


class ProtocolError(PsyqError, ValueError):
    """A frame or value that breaks the psyq wire protocol; the message names it."""
