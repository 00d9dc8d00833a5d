"""A clean close keeps the active jobs' locks (issue 49): the next open loads each lock with
the expiry it had, so a worker still running the job (a `psyq server`'s client, a shared
file's peer) renews and finishes it, instead of the first stalled check taking it back."""

from __future__ import annotations

from pathlib import Path

import psyq
from psyq.backends import open_backend, release_backend


async def test_a_clean_close_keeps_the_lock_of_an_active_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with psyq.Queue("q", connection=url) as queue:
        kept, expired = await queue.add("kept"), await queue.add("expired")
        worker = psyq.Worker("q", autorun=False, connection=url, lock_duration=60_000)
        assert (await worker.get_next_job("long")).id == kept.id  # type: ignore[union-attr]
        worker.lock_duration = 1
        assert (await worker.get_next_job("short")).id == expired.id  # type: ignore[union-attr]
        await worker.close()
    backend = await open_backend(url)
    try:
        stalled = await backend.move_stalled_jobs_to_wait("q", 5, 1)
        assert stalled.stalled == [expired.id]  # its lock had expired before the close
        assert await backend.extend_locks("q", {kept.id: "long"}, 60_000) == []
        assert await backend.get_state("q", kept.id) == "active"
    finally:
        await release_backend(backend)
