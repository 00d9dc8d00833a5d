"""move_to_waiting_children's own rule on Redis (docs/backends.md): a parent whose children
all finished while it ran goes back to waiting; one whose children finished before it
became active again has nothing to wait for. The two are told apart by the server's
clock (the child's finishedOn against the parent's processedOn), and a child that moved
its parent to waiting in the same millisecond as the parent was taken again finished
before it ran: bullmq's own suite saw its resumed parent sent back once more (~1 CI run
in 10, worker_test's test_create_children_at_runtime)."""

from __future__ import annotations

import asyncio
from typing import Any

import psyq
from tests.conftest import fresh_name


async def test_a_child_finished_in_the_millisecond_its_parent_resumed_is_not_waited_for(
    url: str, raw: Any
) -> None:
    parents = psyq.Queue(fresh_name("parents"), connection=url)
    children = psyq.Queue(fresh_name("children"), connection=url)
    answers: list[bool] = []
    done = asyncio.Event()

    async def parent(job: psyq.Job, token: str) -> str:
        if not answers:
            await children.add("kid", parent={"id": job.id, "queue": job.queue_qualified_name})
            answers.append(await job.move_to_waiting_children(token))
            raise psyq.WaitingChildrenError()
        (kid_key,) = await raw.hkeys(f"{job.queue_qualified_name}:{job.id}:processed")
        finished_on = await raw.hget(kid_key, "finishedOn")
        await raw.hset(f"{job.queue_qualified_name}:{job.id}", "processedOn", finished_on)
        answers.append(await job.move_to_waiting_children(token))
        done.set()
        return "resumed"

    job = await parents.add("parent")
    parent_worker = psyq.Worker(parents.name, parent, connection=url)
    kid_worker = psyq.Worker(children.name, lambda job: None, connection=url)
    try:
        await asyncio.wait_for(done.wait(), 10)
        assert answers == [True, False]
        assert await job.get_state() in {"active", "completed"}
    finally:
        for closing in (parent_worker, kid_worker, parents, children):
            await closing.close()
