"""The floor of a psyq:// single add on asyncio's loop: a bare request/answer ping-pong.

    python -m bench.studies.pingpong server PORT [REQUESTS]  answers 39 bytes to every read;
                                                             exits after REQUESTS + 200
    python -m bench.studies.pingpong client PORT REQUESTS    200 warm-up round trips, then
                                                             REQUESTS; prints round trips/s
                                                             and CPU µs each

Both ends have the shape of psyq's (an `asyncio.BufferedProtocol` reading into one reusable
buffer, a future per request awaited by a task, one write per message) and none of its
work: no framing, no codec, no engine. Its cost per round trip (wall, CPU, or instructions
under `valgrind --tool=callgrind` with two REQUESTS counts) is what any asyncio client and
asyncio server pay for a sequential request, the part of a single add psyq cannot remove.
"""

from __future__ import annotations

import asyncio
import sys
import time

ANSWER = 39  # bytes: the size of psyq's answer to an add
REQUEST = b"x" * 60  # about the size of psyq's add request
WARM_UP = 200


class Answering(asyncio.BufferedProtocol):
    def __init__(self, done: asyncio.Future[None], left: int) -> None:
        self.buffer = memoryview(bytearray(16 * 1024))
        self.done, self.left = done, left

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.transport.write(bytes(self.buffer[:ANSWER]))
        self.left -= 1
        if self.left == 0:
            self.done.set_result(None)


class Asking(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.buffer = memoryview(bytearray(16 * 1024))
        self.waiting: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        future, self.waiting = self.waiting, None
        if future is not None:
            future.set_result(bytes(self.buffer[:nbytes]))

    def ask(self, data: bytes) -> asyncio.Future[bytes]:
        self.waiting = future = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return future


async def serve(port: int, requests: int) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    left = requests + WARM_UP if requests else -1
    server = await loop.create_server(lambda: Answering(done, left), "127.0.0.1", port)
    async with server:
        await done


async def ask(port: int, requests: int) -> None:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(Asking, "127.0.0.1", port)
    for _ in range(WARM_UP):
        await protocol.ask(REQUEST)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(requests):
        await protocol.ask(REQUEST)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{requests / wall:.0f} round trips/s, client CPU {cpu / requests * 1e6:.1f} µs each")
    protocol.transport.close()


if __name__ == "__main__":
    role, port = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    asyncio.run(serve(port, count) if role == "server" else ask(port, count))
