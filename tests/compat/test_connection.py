"""What a `bullmq` `connection` option means as a psyq URL."""

from __future__ import annotations

import pytest
import redis.asyncio

from psyq.compat.bullmq.connection import connection_url
from psyq.errors import InvalidURLError


def test_no_connection_is_psyq_url_else_local_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PSYQ_URL", raising=False)
    assert connection_url(None) == "redis://localhost:6379"
    assert connection_url({}) == "redis://localhost:6379"
    monkeypatch.setenv("PSYQ_URL", "sqlite:///jobs.db")
    assert connection_url(None) == "sqlite:///jobs.db"


def test_urls_pass_through() -> None:
    for url in ("memory://", "sqlite:///x.db", "psyq://h:6789", "postgresql://u@h/db"):
        assert connection_url(url) == url


def test_dicts_and_clients_are_redis() -> None:
    assert connection_url({"host": "h", "port": 7000, "db": 2}) == "redis://h:7000/2"
    assert connection_url({"password": "p@ss", "username": "me"}) == (
        "redis://me:p%40ss@localhost:6379/0"
    )
    assert connection_url({"url": "rediss://h:1"}) == "rediss://h:1"
    client = redis.asyncio.Redis(host="h2", port=6390, db=1, password="pw")
    assert connection_url(client) == "redis://:pw@h2:6390/1"


def test_other_values_are_refused() -> None:
    with pytest.raises(InvalidURLError):
        connection_url("localhost:6379")
    with pytest.raises(InvalidURLError):
        connection_url(6379)
