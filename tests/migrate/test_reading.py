"""The driver's wave reader (no Spark): slices keep each queue's pages in line order, at most
`readers` queues per wave, every job exactly once."""

from __future__ import annotations

import psyq
from psyq.backends import open_backend, release_backend
from psyq_migrate.reading import WaveReader
from tests.conftest import fresh_name


async def test_waves_cover_every_job_once_in_line_order() -> None:
    sizes = {fresh_name(): size for size in (7, 3, 5)}
    for name, size in sizes.items():
        async with psyq.Queue(name, connection="memory://") as queue:
            await queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(size)])
    backend = await open_backend("memory://")
    try:
        reader = WaveReader(backend, list(sizes), limit=2, readers=2, pages=2)
        waves = []
        while wave := await reader.next_wave():
            waves.append(wave)
    finally:
        await release_backend(backend)
    assert all(len(wave) <= 2 for wave in waves)  # at most two queues read at once
    assert all(len({queue for queue, _ in part}) == 1 for wave in waves for part in wave)
    seen: dict[str, list[int]] = {name: [] for name in sizes}
    for wave in waves:
        for part in wave:
            for queue_name, page in part:
                seen[queue_name].extend(int(job.id) for job in page.jobs)
    assert seen == {name: list(range(1, size + 1)) for name, size in sizes.items()}
