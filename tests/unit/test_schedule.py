"""Scheduler specs: next run times, DST, bounds."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from psyq.errors import InvalidOptionsError
from psyq.rules.schedule import first_run, next_run, normalize_repeat

BERLIN = ZoneInfo("Europe/Berlin")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def local(millis: int, zone: ZoneInfo = BERLIN) -> datetime:
    return datetime.fromtimestamp(millis / 1000, zone)


def test_every_runs_now_then_every_interval() -> None:
    spec = normalize_repeat({"every": 1000})
    assert first_run(spec, 5_000) == 5_000
    assert next_run(spec, 5_000, 1, 5_100) == 6_000


def test_every_skips_missed_runs_instead_of_piling_up() -> None:
    spec = normalize_repeat({"every": 1000})
    assert next_run(spec, 5_000, 1, 9_500) == 10_000


def test_cron_in_a_time_zone_across_spring_forward() -> None:
    spec = normalize_repeat({"pattern": "30 2 * * *", "tz": "Europe/Berlin"})
    start = ms(datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN))
    first = first_run(spec, start)
    assert first is not None
    assert local(first) == datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN)  # 02:30 does not exist
    second = next_run(spec, first, 1, first)
    assert second is not None
    assert local(second) == datetime(2026, 3, 30, 2, 30, tzinfo=BERLIN)


def test_cron_across_fall_back_runs_once() -> None:
    spec = normalize_repeat({"pattern": "30 2 * * *", "tz": "Europe/Berlin"})
    start = ms(datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN))
    first = first_run(spec, start)
    assert first is not None
    second = next_run(spec, first, 1, first)
    assert second is not None
    assert local(second).day == 26  # 02:30 on the 25th happens twice; one run only
    assert local(first).day == 25


def test_six_fields_have_seconds_first() -> None:
    spec = normalize_repeat({"pattern": "*/20 * * * * *"})
    start = ms(datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    assert first_run(spec, start) == start + 15_000


def test_limit_start_and_end() -> None:
    spec = normalize_repeat({"every": 10, "limit": 2, "start_date": 1_000, "end_date": 1_025})
    assert first_run(spec, 0) == 1_000
    assert next_run(spec, 1_000, 1, 1_000) == 1_010
    assert next_run(spec, 1_010, 2, 1_010) is None
    no_limit = normalize_repeat({"every": 10, "end_date": 1_025})
    assert next_run(no_limit, 1_020, 1, 1_020) is None


def test_immediately_runs_a_pattern_now() -> None:
    spec = normalize_repeat({"pattern": "0 0 1 1 *", "immediately": True})
    assert first_run(spec, 123_456) == 123_456


def test_dates_may_be_datetimes() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    assert normalize_repeat({"every": 5, "startDate": moment})["startDate"] == ms(moment)


@pytest.mark.parametrize(
    "bad",
    [{}, {"every": 0}, {"pattern": 5}, {"pattern": "* *"}, {"every": 1, "immediately": "y"}],
)
def test_bad_specs(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionsError):
        normalize_repeat(bad)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("0 0 ? * MON", datetime(2026, 11, 30, tzinfo=UTC)),
        ("@daily", datetime(2026, 11, 26, tzinfo=UTC)),
        ("@hourly", datetime(2026, 11, 25, 15, tzinfo=UTC)),
        ("@weekly", datetime(2026, 11, 29, tzinfo=UTC)),
        ("@monthly", datetime(2026, 12, 1, tzinfo=UTC)),
        ("@yearly", datetime(2027, 1, 1, tzinfo=UTC)),
        ("@annually", datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_cron_question_marks_and_aliases_read_as_bullmq_reads_them(
    pattern: str, expected: datetime
) -> None:
    spec = normalize_repeat({"pattern": pattern})
    assert spec["pattern"] == pattern  # stored as given: Node BullMQ reads it too
    assert first_run(spec, ms(datetime(2026, 11, 25, 14, 0, 30, tzinfo=UTC))) == ms(expected)
