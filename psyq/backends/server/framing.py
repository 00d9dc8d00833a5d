"""Splitting received bytes into frame bodies (`FrameBuffer`), at both ends of psyq://:
each frame is a 4-byte big-endian length (`protocol.HEADER`), then that many bytes.
"""

from __future__ import annotations

from psyq.backends.server.protocol import HEADER, MAX_FRAME_BYTES, ProtocolError

__all__ = ["FrameBuffer"]

READ_BUFFER = 16 * 1024  # bytes an idle connection holds to receive into; grown for a larger
# frame (doubling) and shrunk back once everything received is read


class FrameBuffer:
    """Collects received bytes and splits them into frame bodies.

    Bytes arrive through `feed` (a plain protocol's data) or straight into one reusable
    buffer: `get_buffer` hands out its free tail and `buffer_updated` reads the frames
    (asyncio.BufferedProtocol). The buffered way saves the large bytes object a plain
    protocol's every read allocates, which costs more than the rest of a small request."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, size: int = READ_BUFFER) -> None:
        self.max_frame = max_frame
        self._size = size
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte not yet read as part of a frame
        self._end = 0  # the end of the bytes received

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete frame bodies. ProtocolError on an oversize one."""
        bodies: list[bytes] = []
        while data:
            room = self.get_buffer(len(data))
            count = min(len(room), len(data))
            room[:count] = data[:count]
            data = data[count:]
            bodies += self.buffer_updated(count)
        return bodies

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """The free space to receive into (at least one byte)."""
        if self._end == len(self._buf):
            self._make_room()
        return self._view[self._end :]

    def _make_room(self) -> None:
        start, end = self._start, self._end
        kept = end - start
        if start == 0:  # one frame fills the buffer: a larger one (its size was checked)
            larger = bytearray(2 * len(self._buf))
            larger[:kept] = self._view[:kept]
            self._buf, self._view = larger, memoryview(larger)
        else:  # move the partial frame to the front
            self._buf[:kept] = self._view[start:end]
        self._start, self._end = 0, kept

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        """`nbytes` were received into the last `get_buffer`: the complete frame bodies."""
        self._end = end = self._end + nbytes
        buf, pos = self._buf, self._start
        bodies: list[bytes] = []
        while end - pos >= 4:
            (size,) = HEADER.unpack_from(buf, pos)
            if size > self.max_frame:
                raise ProtocolError(
                    f"frame of {size} bytes exceeds the limit of {self.max_frame} bytes"
                )
            if end - pos - 4 < size:
                break
            bodies.append(bytes(self._view[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos == end:  # all read: start again at the front (a grown buffer shrinks back)
            self._start = self._end = 0
            if len(buf) > self._size:
                self._buf = bytearray(self._size)
                self._view = memoryview(self._buf)
        else:
            self._start = pos
        return bodies

    def release(self) -> None:
        """Drop the buffer (the connection closed): its memory goes now, whatever still
        refers to this object."""
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._start = self._end = 0

    @property
    def partial(self) -> bool:
        """True while part of a frame is buffered."""
        return self._end > self._start
