"""`bullmq`'s Postgres options (`backend: "postgres"`, `connection` as a conninfo string, a
URL or a dict, `schema`, `skipVersionCheck`) as psyq URLs, and the combinations refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from psyq.compat.bullmq import FlowProducer, Queue, QueueEvents, Worker
from psyq.compat.bullmq.connection import store_url
from psyq.errors import InvalidOptionsError, InvalidURLError
from tests.conftest import fresh_name
from tests.postgres.conftest import (  # noqa: F401 - fixtures
    conninfo_for,
    fresh_schema,
    pg_server,
)

PG = {"backend": "postgres"}


def test_a_conninfo_string_is_a_url() -> None:
    url = store_url({**PG, "connection": "host=db port=5433 dbname=app user=me"})
    assert url == "postgresql://me@db:5433/app?schema=bullmq"


def test_quoted_values_and_socket_folders() -> None:
    conninfo = "host=/run/pg port=5432 dbname='my db' password='it\\'s' user=me"
    parts = urlsplit(store_url({**PG, "connection": conninfo, "schema": "jobs"}))
    assert (parts.netloc, parts.path) == ("me:it%27s@", "/my%20db")
    query = dict(parse_qsl(parts.query))
    assert query == {"host": "/run/pg", "port": "5432", "schema": "jobs"}


def test_a_dict_and_a_url() -> None:
    given = {"host": "db", "port": 5432, "database": "app", "user": "u", "password": "p@ss"}
    assert store_url({**PG, "connection": given}) == (
        "postgresql://u:p%40ss@db:5432/app?schema=bullmq"
    )
    assert store_url({**PG, "connection": "postgresql://u@db/app", "schema": "s"}) == (
        "postgresql://u@db/app?schema=s"
    )
    # libpq's defaults (PG* variables) when no connection is named, as in bullmq
    assert store_url({**PG, "skipVersionCheck": True}) == "postgresql://?schema=bullmq"


def test_skip_version_check_is_taken_on_every_store() -> None:
    """bullmq checks the Redis or Postgres server's version unless told not to; psyq's
    stores check none, so the option is taken and changes nothing."""
    assert store_url({"connection": "memory://", "skipVersionCheck": True}) == "memory://"


def test_a_postgres_url_takes_the_schema_option_without_backend() -> None:
    assert store_url({"connection": "postgresql://h/d", "schema": "s"}) == (
        "postgresql://h/d?schema=s"
    )


@pytest.mark.parametrize(
    ("opts", "option"),
    [
        ({"backend": "mysql"}, "backend"),
        ({**PG, "connection": "host=db connect_timeout=3"}, "connection"),
        ({**PG, "connection": {"host": "db", "db": 2}}, "connection"),
        ({**PG, "connection": "host=db port=x"}, "connection"),
        ({**PG, "connection": "host=db = x"}, "connection"),
        ({**PG, "connection": 5432}, "connection"),
        ({**PG, "prefix": "tenant"}, "prefix"),
        ({**PG, "skipVersionCheck": "yes"}, "skipVersionCheck"),
        ({**PG, "schema": 7}, "schema"),
        ({**PG, "connection": "postgresql://h/d?schema=a", "schema": "b"}, "schema"),
        ({"connection": "redis://h:6379", "schema": "jobs"}, "schema"),
        ({"connection": "memory://", "skipVersionCheck": 1}, "skipVersionCheck"),
    ],
)
def test_what_a_store_cannot_honour_is_refused_by_name(opts: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOptionsError) as refused:
        store_url(opts)
    assert refused.value.option == option and option in str(refused.value)


def test_a_schema_the_store_cannot_name_and_a_conninfo_without_backend() -> None:
    with pytest.raises(InvalidURLError, match="'Jobs'"):
        store_url({**PG, "schema": "Jobs"})
    with pytest.raises(InvalidURLError, match="backend: 'postgres'"):
        store_url({"connection": "host=db dbname=app"})


async def test_every_class_runs_on_bullmqs_postgres_options(
    pg_server: str,  # noqa: F811 - the fixture
    fresh_schema: Callable[[], str],  # noqa: F811 - the fixture
) -> None:
    """Queue, Worker, FlowProducer and QueueEvents given a conninfo string and a schema."""
    conninfo = conninfo_for(pg_server)
    opts = {**PG, "connection": conninfo, "schema": fresh_schema()}
    name = fresh_name("bullmq-pg")
    events = QueueEvents(name, {**opts, "lastEventId": "0"})
    completed = asyncio.get_running_loop().create_future()

    def on_completed(args: dict[str, Any], _id: str) -> None:
        if not completed.done():
            completed.set_result(args)

    events.on("completed", on_completed)
    queue = Queue(name, opts)
    flow = FlowProducer(opts)
    await flow.add({"name": "parent", "queueName": name, "data": {"n": 1}})
    worker = Worker(name, lambda job, token: asyncio.sleep(0, job.data["n"] + 1), opts)
    assert (await completed)["returnvalue"] == 2
    assert await queue.getJobCounts("completed") == {"completed": 1}
    job_scheduler = await queue.upsertJobScheduler("tick", {"every": 60_000}, job_name="t")
    assert job_scheduler is not None and job_scheduler.id is not None
    assert job_scheduler.id.startswith("repeat:tick:")
    for closing in (worker, flow, events, queue):
        await closing.close()
