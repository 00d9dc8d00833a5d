"""The event log's ids across a history that starts again (issue 42): ordered by time then
number, so a reader's id from an earlier history is followed by this history's events."""

from __future__ import annotations

from psyq.backends.engine.eventlog import EventLog, parse_event_id


def ids(log: EventLog, after: str) -> list[str]:
    return [event_id for event_id, _, _ in log.read(parse_event_id(after, log.newest), 100)]


def test_a_clock_that_steps_back_repeats_the_last_time() -> None:
    log = EventLog()
    for ms in (1000, 1005, 990, 1010):
        log.add(ms, "added", "1", "x")
    assert ids(log, "0") == ["1000-1", "1005-2", "1005-3", "1010-4"]


def test_a_reader_of_this_history_resumes_after_its_id() -> None:
    log = EventLog()
    for ms in (1000, 1000, 1001, 1002):
        log.add(ms, "added", "1", "x")
    assert ids(log, "1000-2") == ["1001-3", "1002-4"]
    assert ids(log, "2") == ["1001-3", "1002-4"]  # a bare number
    assert ids(log, "$") == []


def test_an_id_of_an_earlier_history_reads_from_this_ones_start() -> None:
    log = EventLog()  # a restarted server: numbers from 1 again, at a later time
    for ms in (5000, 5001, 5002):
        log.add(ms, "added", "1", "x")
    assert ids(log, "4000-2") == ["5000-1", "5001-2", "5002-3"]  # a number this log has
    assert ids(log, "4000-900") == ["5000-1", "5001-2", "5002-3"]  # a number past it
    assert ids(log, "5001-900") == ["5002-3"]  # the restart came at 5001: its later events


def test_an_id_past_a_log_that_lost_its_newest_events() -> None:
    log = EventLog()  # a buffered file killed after 4 events: 2 kept, 3-4 given out again
    for ms in (1000, 1001, 2000, 2001):
        log.add(ms, "added", "1", "x")
    assert ids(log, "1500-4") == ["2000-3", "2001-4"]
