"""psyq.core.options: names, aliases, every validation path, retention policies."""

from __future__ import annotations

from typing import Any

import pytest

from psyq.core.options import merge_job_options, normalize_job_options
from psyq.errors import InvalidOptionsError
from psyq.rules.limits import MAX_PRIORITY, check_int
from psyq.rules.retention import KeepJobs, keep_jobs

SNAKE_TO_CAMEL = {
    "job_id": "jobId",
    "remove_on_complete": "removeOnComplete",
    "remove_on_fail": "removeOnFail",
    "keep_logs": "keepLogs",
    "stack_trace_limit": "stackTraceLimit",
    "size_limit": "sizeLimit",
    "fail_parent_on_failure": "failParentOnFailure",
    "continue_parent_on_failure": "continueParentOnFailure",
    "ignore_dependency_on_failure": "ignoreDependencyOnFailure",
    "remove_dependency_on_failure": "removeDependencyOnFailure",
}

GOOD_VALUES: dict[str, Any] = {
    "attempts": 3,
    "backoff": {"type": "exponential", "delay": 1000, "jitter": 0.5},
    "delay": 5000,
    "priority": 2,
    "lifo": True,
    "jobId": "order-17",
    "removeOnComplete": 100,
    "removeOnFail": {"age": 3600, "count": 10},
    "keepLogs": 50,
    "stackTraceLimit": 5,
    "sizeLimit": 1024,
    "parent": {"id": "1", "queue": "bull:parents"},
    "failParentOnFailure": True,
    "continueParentOnFailure": False,
    "ignoreDependencyOnFailure": False,
    "removeDependencyOnFailure": False,
    "deduplication": {"id": "d1", "ttl": 1000, "extend": True, "replace": False},
    "timestamp": 1_700_000_000_000,
}


def test_empty_options() -> None:
    assert normalize_job_options() == {}
    assert normalize_job_options(None) == {}
    assert normalize_job_options({}) == {}


@pytest.mark.parametrize("name", sorted(GOOD_VALUES))
def test_every_camel_case_option_is_accepted(name: str) -> None:
    assert normalize_job_options({name: GOOD_VALUES[name]}) == {name: GOOD_VALUES[name]}


@pytest.mark.parametrize(("snake", "camel"), sorted(SNAKE_TO_CAMEL.items()))
def test_snake_case_names_map_to_camel_case(snake: str, camel: str) -> None:
    value = GOOD_VALUES[camel]
    assert normalize_job_options({snake: value}) == {camel: value}
    assert normalize_job_options(**{snake: value}) == {camel: value}


def test_keywords_win_over_mapping() -> None:
    result = normalize_job_options({"attempts": 2, "removeOnComplete": 1}, remove_on_complete=5)
    assert result == {"attempts": 2, "removeOnComplete": 5}


def test_all_good_values_together() -> None:
    opts = {k: v for k, v in GOOD_VALUES.items() if k != "failParentOnFailure"}
    assert normalize_job_options(opts) == opts


def test_input_mapping_is_not_modified() -> None:
    opts = {"job_id": "x"}
    normalize_job_options(opts)
    assert opts == {"job_id": "x"}


@pytest.mark.parametrize("name", ["bogus", "removeOnCompleted", "jobid", "repeat"])
def test_unknown_option_is_named(name: str) -> None:
    with pytest.raises(InvalidOptionsError, match=name) as info:
        normalize_job_options({name: 1})
    assert info.value.option == name


def test_non_string_option_name() -> None:
    with pytest.raises(InvalidOptionsError):
        normalize_job_options({1: 2})  # type: ignore[dict-item]


def test_options_must_be_a_mapping() -> None:
    with pytest.raises(InvalidOptionsError, match="mapping"):
        normalize_job_options([("attempts", 1)])  # type: ignore[arg-type]


BAD_VALUES: list[tuple[str, Any]] = [
    ("attempts", 0),
    ("attempts", -1),
    ("attempts", 1.5),
    ("attempts", "3"),
    ("attempts", True),
    ("attempts", None),
    ("delay", -1),
    ("delay", 2**42 + 1),
    ("delay", 1.0),
    ("priority", -1),
    ("priority", MAX_PRIORITY + 1),
    ("priority", "high"),
    ("lifo", 1),
    ("lifo", "true"),
    ("jobId", 17),
    ("jobId", "17"),
    ("jobId", "-17"),
    ("jobId", "a:b"),
    ("jobId", ""),
    ("jobId", True),
    ("jobId", None),
    ("jobId", 1.5),
    ("removeOnComplete", -1),
    ("removeOnComplete", "all"),
    ("removeOnComplete", {"age": -1}),
    ("removeOnComplete", {"count": "10"}),
    ("removeOnComplete", {"limit": -1}),
    ("removeOnComplete", {"forever": 1}),
    ("removeOnFail", 1.5),
    ("removeOnFail", None),
    ("keepLogs", -1),
    ("keepLogs", True),
    ("stackTraceLimit", -1),
    ("sizeLimit", 0),
    ("sizeLimit", "1kb"),
    ("timestamp", -1),
    ("timestamp", "now"),
    ("failParentOnFailure", 1),
    ("continueParentOnFailure", "yes"),
    ("ignoreDependencyOnFailure", None),
    ("removeDependencyOnFailure", 0),
]


@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_bad_value_is_named(name: str, value: Any) -> None:
    with pytest.raises(InvalidOptionsError, match=name) as info:
        normalize_job_options({name: value})
    assert info.value.option is not None
    assert info.value.option.startswith(name)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        "fixed",
        {"delay": 10},
        {"type": ""},
        {"type": 3},
        {"type": "fixed", "delay": -1},
        {"type": "fixed", "delay": "10"},
        {"type": "fixed", "jitter": 1.5},
        {"type": "fixed", "jitter": -0.1},
        {"type": "fixed", "jitter": True},
        {"type": "fixed", "jitter": "0.5"},
        {"type": "fixed", "strategy": "x"},
        True,
    ],
)
def test_bad_backoff(value: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="backoff"):
        normalize_job_options(backoff=value)


@pytest.mark.parametrize("value", [0, 1000, {"type": "fixed"}, {"type": "my-own", "delay": 5}])
def test_good_backoff(value: Any) -> None:
    assert normalize_job_options(backoff=value) == {"backoff": value}


@pytest.mark.parametrize(
    "value",
    [
        {"id": "1"},
        {"queue": "q"},
        {"id": "", "queue": "q"},
        {"id": 1, "queue": "q"},
        {"id": "1", "queue": "q", "extra": 1},
        "q:1",
    ],
)
def test_bad_parent(value: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="parent"):
        normalize_job_options(parent=value)


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"id": ""},
        {"id": 5},
        {"id": "d", "ttl": 0},
        {"id": "d", "ttl": "1s"},
        {"id": "d", "extend": 1},
        {"id": "d", "replace": "no"},
        {"id": "d", "other": True},
        "d",
    ],
)
def test_bad_deduplication(value: Any) -> None:
    with pytest.raises(InvalidOptionsError, match="deduplication"):
        normalize_job_options(deduplication=value)


@pytest.mark.parametrize("value", [True, False, 0, 10, {"age": 60}, {"count": 5, "limit": 100}])
def test_good_keep_values(value: Any) -> None:
    assert normalize_job_options(remove_on_complete=value) == {"removeOnComplete": value}


def test_job_id_integer_is_rejected_even_as_int() -> None:
    with pytest.raises(InvalidOptionsError, match="integer"):
        normalize_job_options(job_id=5)


@pytest.mark.parametrize("text", ["5", "-5", "0", "9007199254740992", "123456789012345680"])
def test_a_job_id_that_js_parses_back_unchanged_is_an_integer(text: str) -> None:
    with pytest.raises(InvalidOptionsError, match="integer"):
        normalize_job_options(jobId=text)


@pytest.mark.parametrize(
    "text",
    [
        "01",
        "-0",
        "+1",
        "1.5",
        " 1",
        "1e3",
        "\u0663",
        "9007199254740993",
        "123456789012345678",
        "1" * 22,
    ],
)
def test_a_job_id_that_js_does_not_parse_back_unchanged_is_custom(text: str) -> None:
    """BullMQ's own rule (`${parseInt(id, 10)}` === id), so both sides accept the same ids."""
    assert normalize_job_options(jobId=text) == {"jobId": text}


def test_job_id_with_letters_and_digits_is_fine() -> None:
    assert normalize_job_options(jobId="17a") == {"jobId": "17a"}


PARENT_POLICIES = [
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
]


@pytest.mark.parametrize("first", PARENT_POLICIES)
@pytest.mark.parametrize("second", PARENT_POLICIES)
def test_parent_policies_exclude_each_other(first: str, second: str) -> None:
    if first == second:
        assert normalize_job_options({first: True}) == {first: True}
        return
    with pytest.raises(InvalidOptionsError, match="exclude"):
        normalize_job_options({first: True, second: True})


def test_parent_policies_false_do_not_conflict() -> None:
    opts = {"failParentOnFailure": True, "continueParentOnFailure": False}
    assert normalize_job_options(opts) == opts


def test_merge_job_options_per_job_wins() -> None:
    defaults = {"attempts": 3, "priority": 1}
    assert merge_job_options(defaults, {"priority": 2}) == {"attempts": 3, "priority": 2}
    assert merge_job_options({}, {"priority": 2}) == {"priority": 2}


def test_merge_job_options_does_not_modify_inputs() -> None:
    defaults = {"attempts": 3}
    opts = {"priority": 2}
    merged = merge_job_options(defaults, opts)
    merged["lifo"] = True
    assert defaults == {"attempts": 3}
    assert opts == {"priority": 2}


def test_check_int_bounds() -> None:
    assert check_int("n", 5, minimum=1, maximum=5) == 5
    with pytest.raises(InvalidOptionsError, match="'n' must be between 1 and 5, got 6"):
        check_int("n", 6, minimum=1, maximum=5)
    with pytest.raises(InvalidOptionsError, match="'n' must be >= 1, got 0"):
        check_int("n", 0, minimum=1)
    with pytest.raises(InvalidOptionsError, match="'n' must be an integer, got False"):
        check_int("n", False)


@pytest.mark.parametrize(
    "options",
    [
        {"attempts": 2**31},
        {"keepLogs": 2**31},
        {"removeOnComplete": 2**31},
        {"removeOnFail": {"count": 2**31}},
        {"removeOnComplete": {"age": 60, "limit": 2**31}},
    ],
)
def test_counts_fit_32_bits(options: dict[str, object]) -> None:
    """What BullMQ 6's Postgres layout keeps in `integer` columns is refused past 2**31 - 1
    on every store, naming the option and the value."""
    [name] = options
    with pytest.raises(InvalidOptionsError, match=rf"{name}.*2147483647, got 2147483648"):
        normalize_job_options(options)
    edge = {name: 2**31 - 1 if isinstance(options[name], int) else {"count": 2**31 - 1}}
    assert normalize_job_options(edge)


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        (None, KeepJobs()),
        (False, KeepJobs()),
        (True, KeepJobs(count=0)),
        (0, KeepJobs(count=0)),
        (10, KeepJobs(count=10)),
        ({"count": 5}, KeepJobs(count=5)),
        ({"age": 60}, KeepJobs(age_ms=60_000)),
        ({"age": 60, "count": 5, "limit": 100}, KeepJobs(count=5, age_ms=60_000, limit=100)),
        ({}, KeepJobs()),
    ],
)
def test_keep_jobs(value: Any, policy: KeepJobs) -> None:
    assert keep_jobs(value) == policy


def test_keeps_all() -> None:
    assert keep_jobs(False).keeps_all
    assert not keep_jobs(True).keeps_all
    assert not keep_jobs({"age": 1}).keeps_all
    assert not keep_jobs(3).keeps_all
