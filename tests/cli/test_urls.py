"""Backend names as shorthand for URLs on the command line, and secrets masked wherever the
CLI prints a URL."""

from __future__ import annotations

import json

import pytest

from psyq.cli.main import main
from psyq.cli.urls import resolve_cli_url
from psyq.errors import PsyqError, redact_url


@pytest.mark.parametrize(
    ("text", "env", "url"),
    [
        ("sqlite", {}, "sqlite:///psyq.db"),
        (
            "sqlite",
            {"PSYQ_URL": "sqlite:///jobs.db?durability=durable"},
            "sqlite:///jobs.db?durability=durable",
        ),
        ("sqlite", {"PSYQ_URL": "redis://elsewhere"}, "sqlite:///psyq.db"),
        ("redis", {}, "redis://localhost:6379/0"),
        ("redis", {"REDIS_URL": "redis://:pw@cache:6380/2"}, "redis://:pw@cache:6380/2"),
        ("postgres", {"DATABASE_URL": "postgresql://u:pw@db/app"}, "postgresql://u:pw@db/app"),
        ("postgresql", {}, "postgresql://localhost/"),
        (
            "postgres",
            {"PGHOST": "db", "PGPORT": "5433", "PGUSER": "app", "PGDATABASE": "jobs"},
            "postgresql://app@db:5433/jobs",
        ),
        (
            "postgres",
            {"PGHOST": "/run/postgresql", "PGDATABASE": "jobs"},
            "postgresql:///jobs?host=%2Frun%2Fpostgresql",
        ),
        ("psyq", {}, "psyq://localhost:6789"),
        ("psyq", {"PSYQ_SERVER_URL": "psyqs://:t@jobs:7000"}, "psyqs://:t@jobs:7000"),
        ("memory", {"PSYQ_URL": "redis://x"}, "memory://"),
        ("Redis", {}, "redis://localhost:6379/0"),
        ("redis://other:6379/1", {"REDIS_URL": "redis://x"}, "redis://other:6379/1"),
        ("sqlite:///x.db", {}, "sqlite:///x.db"),
    ],
)
def test_names_resolve_from_the_environment(text: str, env: dict[str, str], url: str) -> None:
    assert resolve_cli_url(text, env) == url


def test_the_command_prints_what_a_name_resolved_to_password_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2@127.0.0.1:1/0")  # nothing listens there
    assert main(["inspect", "--connection", "redis"]) == 2
    err = capsys.readouterr().err
    assert "psyq inspect: --connection redis = redis://:***@127.0.0.1:1/0" in err
    assert "hunter2" not in err


def test_memory_shorthand_opens_the_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--connection", "memory", "--json"]) == 0
    captured = capsys.readouterr()
    # stdout stays the command's own (JSON): the process's memory store, which tests that
    # ran before may have filled
    assert isinstance(json.loads(captured.out), list)
    assert "memory" not in captured.err  # nothing from the environment to report


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("psyq://:s3cret@host:6789", "psyq://:***@host:6789"),
        ("psyqs://:s3cret@host?ca=/ca.pem", "psyqs://:***@host?ca=/ca.pem"),
        ("psyq://host?token=s3cret&pool=2", "psyq://host?token=***&pool=2"),
        ("redis://user:s3cret@host/0", "redis://user:***@host/0"),
        ("postgresql://u@host/db?password=s3cret", "postgresql://u@host/db?password=***"),
        ("sqlite:///jobs.db?durability=durable", "sqlite:///jobs.db?durability=durable"),
        ("memory://", "memory://"),
    ],
)
def test_printed_urls_mask_passwords_and_tokens(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_backend_messages_mask_the_password() -> None:
    from psyq.backends.redis import open_redis_backend

    backend = open_redis_backend("redis://:hunter2@127.0.0.1:1/0")
    assert backend.safe_url == "redis://:***@127.0.0.1:1/0"
    with pytest.raises(PsyqError) as caught:
        backend.client  # noqa: B018 (not open)
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_migrate_refusals_mask_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    url = "redis://:hunter2@127.0.0.1:1/0"
    assert main(["migrate", "--from", url, "--to", url, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "same backend" in err and "hunter2" not in err and "***" in err
