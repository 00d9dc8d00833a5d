"""Redis Cluster's lean path for script calls: one `wire.WireScripts` per primary.

The slot map is read from the cluster (CLUSTER SLOTS, from any node that answers) and kept
as one primary address per slot; each queue key's slot is computed once. A call goes to
its slot's primary on that node's one connection, so the calls of a loop turn leave in one
write per node and each reply resolves its caller as it arrives (as on one server).

What a node answers instead of running the call:
- MOVED: the slot has a new owner (a reshard, a failover). The slot is pointed at it at
  once, the whole map is read again in the background, and the call is sent again (the
  script did not run).
- ASK: the slot is migrating and the keys are on the target: ASKING and the call go to the
  target in one write, for this call only.
- TRYAGAIN (a multi-key call during a migration) and CLUSTERDOWN: a short, growing pause,
  then the call again; past `ATTEMPTS` the call fails as a lost connection does (the
  backend paces its calls and reads the map again).
A lost connection fails its calls as on one server (the backend's lost-reply handover);
nodes added or removed are picked up when the map is read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from psyq.backends.redis.scripts import Script, pack_command, pack_script_call
from psyq.backends.redis.wire import ASKING, WireScripts, check_reply

__all__ = ["ATTEMPTS", "ClusterWire"]

log = logging.getLogger("psyq.redis")

SLOTS = 16384
ATTEMPTS = 16  # sends of one call before it fails (redirects and pauses: ~2.8 s in all)
PAUSE_S, MAX_PAUSE_S = 0.005, 0.25  # TRYAGAIN / CLUSTERDOWN: 5 ms, doubling, at most 250 ms
MAP_TIMEOUT_S = 5.0  # one node's answer to CLUSTER SLOTS
SLOTS_CACHED = 10_000
CLUSTER_SLOTS = pack_command("CLUSTER", "SLOTS")
Address = tuple[str, int]
_UNSENT: Any = object()  # no reply yet (a reply may be None: a script's nil)


class ClusterWire:
    """Script calls and transactions routed by slot over one `WireScripts` per primary.
    `redirects` counts the MOVED, ASK, TRYAGAIN and CLUSTERDOWN replies followed."""

    def __init__(self, address: dict[str, Any]) -> None:
        self._seed: Address = (address["host"], address["port"])
        names = ("username", "password", "ssl")  # every node's, as the URL's node
        self._auth = {name: address.get(name) for name in names}
        self._slots: list[Address | None] = [None] * SLOTS
        self._nodes: dict[Address, WireScripts] = {}
        self._queue_slots: dict[str, int] = {}  # queue key -> its slot
        self._reading: asyncio.Task[None] | None = None  # the map being read, shared
        self.redirects = {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0, "CLUSTERDOWN": 0}

    # ------------------------------------------------------------------ calls
    async def call(self, script: Script, queue_key: str, args: tuple[Any, ...]) -> Any:
        """Run `script` for the queue at `queue_key` on its slot's primary: straight on the
        node's open connection when the map names one (the hot path: one await), else, and
        after any redirect or NOSCRIPT (the script did not run), through `_routed`."""
        packed = pack_script_call(script, queue_key, args)
        slot = self._queue_slots.get(queue_key)
        address = None if slot is None else self._slots[slot]
        node = None if address is None else self._nodes.get(address)
        wire = None if node is None else node.connected
        if wire is not None:
            reply = await wire.send(packed)
            if not isinstance(reply, Exception):
                return reply
            if isinstance(reply, NoScriptError):  # the slow path loads it and sends again
                reply = _UNSENT
            elif _redirect(reply, None, self._seed)[0] is None:
                raise reply
            return check_reply(await self._routed(queue_key, script, packed, 0, None, reply))
        return check_reply(await self._routed(queue_key, script, packed, 0, None))

    async def transaction(self, framed: bytes, count: int, queue_key: str = "") -> Any:
        """Run `framed` (MULTI, `count` commands about `queue_key`'s keys, EXEC) on the
        primary of the queue's slot; returns EXEC's reply."""
        return check_reply(await self._routed(queue_key, None, framed, count + 1, []))

    async def _routed(
        self,
        queue_key: str,
        script: Script | None,
        packed: bytes,
        skipped: int,
        kept: list[Any] | None,
        reply: Any = None,
    ) -> Any:
        """The reply to `packed` from the node serving the slot of `queue_key`, following
        redirects (see the top), from `reply` when the hot path got one. `kept` collects a
        transaction's QUEUED replies."""
        slot = self._queue_slots.get(queue_key)
        if slot is None:
            slot = self._slot_of(queue_key)
        asking: Address | None = None
        last = reply = _UNSENT if reply is None else reply
        for attempt in range(ATTEMPTS):
            if reply is _UNSENT:
                reply = await self._send(slot, asking, script, packed, skipped, kept)
            kind, target = _redirect(reply, kept, asking or self._seed)
            if kind is None:
                return reply
            self.redirects[kind] += 1
            asking, last, reply = None, reply, _UNSENT
            if kind == "MOVED" and target is not None:
                self._moved(slot, target)
            elif kind == "ASK":
                asking = target
            else:
                await asyncio.sleep(min(PAUSE_S * 2**attempt, MAX_PAUSE_S))  # sleep: backoff
        raise RedisConnectionError(f"slot {slot} still redirected after {ATTEMPTS} tries: {last}")

    async def _send(
        self,
        slot: int,
        asking: Address | None,
        script: Script | None,
        packed: bytes,
        skipped: int,
        kept: list[Any] | None,
    ) -> Any:
        """One send of `packed`: to the slot's primary, or after ASKING to `asking`."""
        node = self._node(asking) if asking else await self._primary(slot)
        if kept is not None:
            kept.clear()
        head, extra = (ASKING + packed, 1) if asking else (packed, 0)
        if script is None:
            return await node.send(head, skipped + extra, kept)
        return await node.run(script, head, skipped + extra)

    def _slot_of(self, queue_key: str) -> int:
        if len(self._queue_slots) >= SLOTS_CACHED:
            self._queue_slots.clear()
        slot = self._queue_slots[queue_key] = key_slot(queue_key.encode())
        return slot

    async def _primary(self, slot: int) -> WireScripts:
        address = self._slots[slot]
        if address is None:
            await self.refresh()
            address = self._slots[slot]
            if address is None:
                raise RedisConnectionError(f"no node of the Redis Cluster serves slot {slot}")
        return self._node(address)

    def _node(self, address: Address) -> WireScripts:
        node = self._nodes.get(address)
        if node is None:
            host, port = address
            node = self._nodes[address] = WireScripts(
                {"host": host, "port": port, "db": 0, **self._auth}
            )
        return node

    def _moved(self, slot: int, target: Address) -> None:
        """MOVED: the slot to `target` now, the whole map read again in the background."""
        self._slots[slot] = target
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_map())
            self._reading.add_done_callback(_logged)

    # ------------------------------------------------------------------ the slot map
    async def refresh(self) -> None:
        """Read the slot map again (callers arriving together share one read)."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_map())
            self._reading.add_done_callback(_logged)
        await asyncio.shield(self._reading)

    async def _read_map(self) -> None:
        """CLUSTER SLOTS from the first node that answers: the primaries in the map first,
        then the URL's node."""
        known = dict.fromkeys(a for a in self._slots if a is not None)
        failures: list[str] = []
        for address in [*known, self._seed]:
            try:
                reply = await asyncio.wait_for(
                    self._node(address).send(CLUSTER_SLOTS), MAP_TIMEOUT_S
                )
                self._install(check_reply(reply), address[0])
                return
            except (RedisError, OSError, TimeoutError) as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}")
        raise RedisConnectionError("no node of the Redis Cluster answered: " + "; ".join(failures))

    def _install(self, ranges: list[Any], asked_host: str) -> None:
        slots: list[Address | None] = [None] * SLOTS
        for start, end, primary, *_replicas in ranges:
            host = str(primary[0]) if primary[0] not in ("", "?") else asked_host
            address = (host, int(primary[1]))
            slots[int(start) : int(end) + 1] = [address] * (int(end) - int(start) + 1)
        self._slots = slots
        serving = set(slots)
        for address in [a for a in self._nodes if a not in serving]:
            self._nodes.pop(address).close()  # removed, or a replica now: no longer routed to

    def primary_of(self, queue_key: str) -> Address | None:
        """Where calls for `queue_key` go now (for tests and diagnostics)."""
        return self._slots[key_slot(queue_key.encode())]

    # ------------------------------------------------------------------ lifecycle
    @property
    def writes(self) -> int:
        """Socket writes of the nodes' current connections."""
        return sum(node.writes for node in self._nodes.values())

    async def wait_idle(self) -> None:
        await asyncio.gather(*(node.wait_idle() for node in self._nodes.values()))

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        for node in self._nodes.values():
            node.close()
        self._nodes.clear()


def _redirect(
    reply: Any, kept: list[Any] | None, origin: Address
) -> tuple[str | None, Address | None]:
    """What a redirect reply (or a transaction's first queued one) says: its kind (None
    when `reply` is no redirect) and, for MOVED and ASK, the node to send to (an empty host
    is `origin`'s)."""
    if not isinstance(reply, ResponseError):
        return None, None
    message = str(reply)
    if message.startswith("EXECABORT") and kept:
        message = next((str(r) for r in kept if isinstance(r, ResponseError)), message)
    kind, _, rest = message.partition(" ")
    if kind in ("TRYAGAIN", "CLUSTERDOWN"):
        return kind, None
    if kind not in ("MOVED", "ASK"):
        return None, None
    host, _, port = rest.partition(" ")[2].rpartition(":")
    return kind, (host or origin[0], int(port))


def _logged(task: asyncio.Task[None]) -> None:
    """A background map read's failure is logged (the next call that needs it reads again)."""
    with contextlib.suppress(asyncio.CancelledError):
        if task.exception() is not None:
            log.debug("reading the Redis Cluster's slot map failed: %s", task.exception())
