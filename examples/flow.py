"""A flow: a parent job that runs once its children are done, and reads their results.

    python examples/flow.py                     # PSYQ_URL, else sqlite:///psyq.db here

Three "page" children render in the queue `pages`; the "book" parent in `books` waits in
waiting-children until the last one completes, then binds their results.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psyq

BOOKS = os.environ.get("PSYQ_QUEUE", "books")
PAGES = f"{BOOKS}-pages"


async def render_page(job: psyq.Job) -> dict[str, Any]:
    return {"page": job.data["page"], "words": 100 * job.data["page"]}


async def bind_book(job: psyq.Job) -> dict[str, Any]:
    pages = list((await job.get_children_values()).values())
    return {"pages": len(pages), "words": sum(page["words"] for page in pages)}


async def main() -> None:
    async with psyq.FlowProducer() as flow, psyq.QueueEvents(BOOKS) as events:
        await events.wait_until_ready(timeout=30)
        node = await flow.add(
            {
                "name": "book",
                "queue_name": BOOKS,
                "data": {"title": "psyq"},
                "children": [
                    {"name": "page", "queue_name": PAGES, "data": {"page": n}} for n in (1, 2, 3)
                ],
            }
        )
        print(f"book {node.job.id} waits for {len(node.children)} pages")
        async with psyq.Worker(PAGES, render_page), psyq.Worker(BOOKS, bind_book):
            result = await node.job.wait_until_finished(events, timeout=30)
    print(f"book {node.job.id} bound: {result}")


if __name__ == "__main__":
    asyncio.run(main())
