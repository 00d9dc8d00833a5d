"""What reserving job ids in blocks costs buffered `sqlite:///` adds (issue 49, item 13).

    python -m bench.studies.id_blocks [--adds 20000] [--rounds 3]

A queue commits the mark of its next block of ids (`psyq.backends.sqlite.ids.ID_BLOCK`
ids) before it hands out the block's first id. A flush reserves the next block of a queue
past half its block (one row more in a transaction it runs anyway); an add that finds no
id reserved reserves a block itself, in a small transaction of its own, and waits for it.
This adds `--adds` jobs one by one to a fresh buffered file (after 500 warm-up adds),
times each reservation an add waited for, and prints per round the adds per second, those
reservations, their time in all and that time per add. Figures are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psyq
from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite import ids
from psyq.backends.sqlite.database import Database


class Timed:
    """Wraps Database.reserve_ids, adding up the calls and their time."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._reserve = Database.reserve_ids

    def reserve(self, db: Database, store: QueueStore, count: int) -> None:
        start = time.perf_counter()
        self._reserve(db, store, count)
        self.seconds += time.perf_counter() - start
        self.calls += 1


async def one_round(adds: int, folder: Path, number: int) -> dict[str, float]:
    timed = Timed()
    url = f"sqlite:///{folder / f'round{number}.db'}"

    def reserve(db: Database, store: QueueStore, count: int) -> None:
        timed.reserve(db, store, count)

    Database.reserve_ids = reserve  # type: ignore[method-assign,assignment]  # bound as the file opens
    try:
        async with psyq.Queue("ids", connection=url) as queue:
            for i in range(500):
                await queue.add("x", {"i": i})
            timed.calls, timed.seconds = 0, 0.0
            start = time.perf_counter()
            for i in range(adds):
                await queue.add("x", {"i": i})
            elapsed = time.perf_counter() - start
    finally:
        Database.reserve_ids = timed._reserve  # type: ignore[method-assign]
    return {
        "adds_per_s": adds / elapsed,
        "reservations": timed.calls,
        "reserve_ms": timed.seconds * 1000,
        "per_add_us": timed.seconds / adds * 1e6,
        "share_of_add": timed.seconds / elapsed,
    }


async def main(args: argparse.Namespace) -> None:
    print(f"block of {ids.ID_BLOCK} ids, {args.adds} adds one by one, buffered")
    with tempfile.TemporaryDirectory() as folder:
        for number in range(args.rounds):
            got = await one_round(args.adds, Path(folder), number)
            print(
                f"round {number + 1}: {got['adds_per_s']:,.0f} adds/s; "
                f"{got['reservations']:.0f} reservations, {got['reserve_ms']:.1f} ms in all, "
                f"{got['per_add_us']:.2f} us per add ({got['share_of_add']:.2%} of the time)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
