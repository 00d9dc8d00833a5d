"""Job ids reserved in blocks: a queue hands out ids up to its limit (`store.id_limit`),
and a limit rises only once the mark past it is committed — by a transaction of its own
(`reserve_ids`) or by a flush ahead of need (`next_block`) — so no id is handed out
twice across a crash; a file opened after reads the marks (database.Database._load)."""

from __future__ import annotations

import sqlite3

from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite.resident import Reader
from psyq.errors import PsyqError

__all__ = ["ID_BLOCK", "RESERVE", "next_block", "reserve_ids"]

ID_BLOCK = 1000  # job ids a queue reserves at a time (reserve_ids)
# A mark only moves up (a flush's and a call's reservations may cross).
RESERVE = (
    "INSERT INTO id_blocks VALUES (?, ?) "
    "ON CONFLICT (queue) DO UPDATE SET reserved = max(reserved, excluded.reserved)"
)


def reserve_ids(ids: Reader, path: str, store: QueueStore, count: int) -> None:
    """Let `store` hand out `count` ids past its last (at least ID_BLOCK): the new mark is
    committed first, through `ids` (the file at `path` in autocommit; one small transaction
    of its own, called under the store's lock), so an id acknowledged before a crash (a
    buffered add the crash lost) is never handed out again. A steady stream of adds seldom
    gets here: each flush reserves the next block of a queue past half its block
    (`next_block`), in its own transaction."""
    upto = store.last_id + max(count, ID_BLOCK)
    try:
        ids.all(RESERVE, (store.key, upto))
    except sqlite3.Error as exc:
        raise PsyqError(
            f"{path}: cannot reserve job ids for queue {store.name!r} ({exc}); nothing was added"
        ) from None
    store.id_limit = upto


def next_block(store: QueueStore) -> int | None:
    """The mark a flush reserves for `store` once it is past half its block of ids (so its
    adds seldom wait for a reservation of their own), or None while it is not."""
    if store.id_limit and store.last_id + ID_BLOCK // 2 > store.id_limit:
        return store.last_id + ID_BLOCK
    return None
