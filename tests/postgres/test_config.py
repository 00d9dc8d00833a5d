"""The postgresql:// URL: psyq's parameters are taken out, bad values are named."""

from __future__ import annotations

import pytest

import psyq
from psyq.backends.postgres import parse_postgres_url


def test_defaults_and_dsn() -> None:
    settings = parse_postgres_url("postgresql://u:p@db:5433/jobs")
    assert settings.dsn == "postgresql://u:p@db:5433/jobs"
    assert (settings.schema, settings.prefix) == ("bullmq", "bull")
    assert (settings.pool_min, settings.pool_max) == (1, 10)
    assert settings.worker_ttl == 30
    assert settings.announce_workers is True
    assert settings.settle_linger_ms == 20
    assert parse_postgres_url("postgresql://db/x?settle_linger_ms=0").settle_linger_ms == 0
    assert not parse_postgres_url("postgresql://db/x?announce_workers=false").announce_workers


def test_own_parameters_are_removed_and_others_passed_on() -> None:
    url = "postgres://db/jobs?schema=team_a&prefix=app&sslmode=disable&pool_max=4"
    settings = parse_postgres_url(url)
    assert settings.dsn == "postgresql://db/jobs?sslmode=disable"
    assert (settings.schema, settings.prefix, settings.pool_max) == ("team_a", "app", 4)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://db/x?schema=Team-A", "Team-A"),
        ("postgresql://db/x?schema=", "schema"),
        ("postgresql://db/x?prefix=a:b", "a:b"),
        ("postgresql://db/x?pool_max=0", "pool_max"),
        ("postgresql://db/x?pool_min=5&pool_max=2", "pool_min"),
        ("postgresql://db/x?pool_min=many", "many"),
        ("postgresql://db/x?worker_ttl=0", "worker_ttl must be a whole number >= 1, got '0'"),
        ("postgresql://db/x?worker_ttl=1.5", "1.5"),
        ("postgresql://db/x?announce_workers=maybe", "announce_workers must be true or false"),
        ("postgresql://db/x?settle_linger_ms=-5", "settle_linger_ms must be .* got '-5'"),
        ("postgresql://db/x?settle_linger_ms=soon", "soon"),
        ("mysql://db/x", "postgresql://"),
    ],
)
def test_bad_urls_name_the_value(url: str, named: str) -> None:
    with pytest.raises(psyq.InvalidURLError, match=named):
        parse_postgres_url(url)


def test_the_scheme_is_registered() -> None:
    from psyq.backends import _factory_for

    for scheme in ("postgres", "postgresql"):
        backend = _factory_for(f"{scheme}://db/x")(f"{scheme}://db/x")
        assert backend.kind == "postgres"
        # jobs are named as the layout names them, `<queue>:<id>`, whatever the prefix
        assert backend.key_prefix is None and backend.job_key("q", "7") == "q:7"
        assert (
            _factory_for("postgres://db/x?prefix=app")("postgres://db/x?prefix=app").key_prefix
            is None
        )
