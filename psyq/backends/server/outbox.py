"""The frames a connection has to write, gathered and sent in batches (`Outbox`), at both
ends of psyq://.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Outbox"]

OUTBOX_BATCH = 16
OUTBOX_BYTES = 64 * 1024  # an outbox holding this much is written at once


class Outbox:
    """Frames waiting to be written: sent together at the end of the event-loop turn, or as
    soon as `batch` frames (or OUTBOX_BYTES) are waiting, so the peer starts on the first
    answers while later ones are still being computed (both ends work at once instead of
    taking turns), and a connection's answers pass the transport's limit one batch at most
    before it pauses the connection."""

    def __init__(self, write: Callable[[bytes], None], batch: int = OUTBOX_BATCH) -> None:
        self._write = write
        self._batch = batch
        self._frames: list[bytes] = []
        self._bytes = 0  # the size of `_frames`
        self._deferred: list[Callable[[], bytes | None]] = []  # frames made at write time
        self._scheduled = False
        self._held = False
        self._loop = asyncio.get_running_loop()

    def add(self, data: bytes) -> None:
        frames = self._frames
        frames.append(data)
        self._bytes += len(data)
        if len(frames) >= self._batch or self._bytes >= OUTBOX_BYTES:
            self.flush()
        elif not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def defer(self, make: Callable[[], bytes | None]) -> None:
        """Call `make` when the frames are written (at the end of this turn) and send the
        frame it returns: requests that gather callers until then (see server/adding.py)."""
        self._deferred.append(make)
        if not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def flush_after_wakeups(self) -> None:
        """Schedule the write now, behind the callbacks just scheduled (the tasks woken by
        answers): the requests those tasks make in their next step leave in that same
        event-loop turn, instead of one turn later."""
        if not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def hold(self) -> None:
        """Keep what is added until `release`, which writes it (no callback scheduled)."""
        self._held = True

    def release(self) -> None:
        self._held = False
        self.flush()

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        if self._deferred:
            makers, self._deferred = self._deferred, []
            for make in makers:
                data = make()
                if data:
                    self._frames.append(data)
        if self._frames:
            data = b"".join(self._frames)
            self._frames = []
            self._bytes = 0
            self._write(data)

    def close(self) -> None:
        """Drop what waits and write nothing more (the connection closed); this also
        breaks the outbox's reference to its connection (through `write`)."""
        self._frames, self._deferred, self._bytes = [], [], 0
        self._write = _write_nothing


def _write_nothing(data: bytes) -> None:
    pass
