"""`psyq migrate --from sqlite --to redis`, exactly as the user story writes it: backend names
resolve from the environment (psyq/cli/urls.py) and the command says what they became."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import psyq
from psyq.cli.main import main
from tests.conformance.conftest import BACKENDS

from .fill import read_queues, state_counts
from .test_cli import fill_plain


def test_migrate_from_sqlite_to_redis_as_written(
    spark: SparkSession,
    tmp_path: Path,
    queue_name: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    redis_url = BACKENDS["redis"](request)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PSYQ_URL", raising=False)  # `sqlite` is then sqlite:///psyq.db
    monkeypatch.setenv("REDIS_URL", redis_url)
    asyncio.run(fill_plain("sqlite:///psyq.db", queue_name, 30))

    assert main(["migrate", "--from", "sqlite", "--to", "redis"]) == 0

    err = capsys.readouterr().err
    assert "psyq migrate: --from sqlite = sqlite:///psyq.db" in err
    assert f"psyq migrate: --to redis = {psyq.errors.redact_url(redis_url)}" in err
    copied = read_queues(redis_url, [queue_name])[queue_name]
    assert state_counts(copied) == {"waiting": 30}
    assert copied == read_queues("sqlite:///psyq.db", [queue_name])[queue_name]
