"""psyq.core.backoff: fixed, exponential, jitter, custom strategies, errors."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from psyq.core.backoff import backoff_delay, register_backoff_strategy
from psyq.errors import InvalidOptionsError
from psyq.rules.reconnect import Reconnect


def unique_name() -> str:
    return f"strategy-{uuid.uuid4().hex}"


def test_no_backoff_retries_at_once() -> None:
    assert backoff_delay(None, 1) == 0


def test_integer_backoff_is_fixed() -> None:
    assert [backoff_delay(250, n) for n in (1, 2, 5)] == [250, 250, 250]


def test_fixed() -> None:
    spec = {"type": "fixed", "delay": 1000}
    assert [backoff_delay(spec, n) for n in (1, 2, 3, 10)] == [1000] * 4


def test_fixed_without_delay_is_zero() -> None:
    assert backoff_delay({"type": "fixed"}, 3) == 0


def test_exponential_doubles_from_the_delay() -> None:
    spec = {"type": "exponential", "delay": 100}
    assert [backoff_delay(spec, n) for n in (1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1600]


@pytest.mark.parametrize("kind", ["fixed", "exponential"])
@pytest.mark.parametrize("jitter", [0.25, 0.5, 1.0])
def test_jitter_stays_within_bounds(kind: str, jitter: float) -> None:
    rng = random.Random(1234)
    spec = {"type": kind, "delay": 1000, "jitter": jitter}
    for attempts in (1, 2, 3):
        full = 1000 if kind == "fixed" else 2 ** (attempts - 1) * 1000
        delays = [backoff_delay(spec, attempts, rng=rng) for _ in range(200)]
        assert all(d is not None and full * (1 - jitter) <= d <= full for d in delays)
        assert len(set(delays)) > 1


def test_jitter_is_reproducible_with_a_seeded_random() -> None:
    spec = {"type": "exponential", "delay": 1000, "jitter": 0.5}
    first = [backoff_delay(spec, 2, rng=random.Random(7)) for _ in range(3)]
    second = [backoff_delay(spec, 2, rng=random.Random(7)) for _ in range(3)]
    assert first == second


def test_zero_jitter_is_exact() -> None:
    spec = {"type": "fixed", "delay": 300, "jitter": 0}
    assert backoff_delay(spec, 1, rng=random.Random(0)) == 300


def test_custom_strategy_from_mapping() -> None:
    calls: list[tuple[Any, ...]] = []
    error = RuntimeError("boom")

    def linear(attempts: int, kind: str, err: BaseException | None, job: Any) -> int:
        calls.append((attempts, kind, err, job))
        return attempts * 10

    spec = {"type": "linear", "delay": 1}
    assert backoff_delay(spec, 3, error, "job", strategies={"linear": linear}) == 30
    assert calls == [(3, "linear", error, "job")]


def test_registered_strategy() -> None:
    name = unique_name()
    register_backoff_strategy(name, lambda attempts, *_: attempts + 1)
    assert backoff_delay({"type": name}, 4) == 5


def test_mapping_strategy_wins_over_registered() -> None:
    name = unique_name()
    register_backoff_strategy(name, lambda *_: 1)
    assert backoff_delay({"type": name}, 1, strategies={name: lambda *_: 2}) == 2


@pytest.mark.parametrize("result", [-1, -5, None])
def test_negative_or_none_means_no_retry(result: int | None) -> None:
    assert backoff_delay({"type": "x"}, 1, strategies={"x": lambda *_: result}) is None


def test_zero_means_at_once() -> None:
    assert backoff_delay({"type": "x"}, 1, strategies={"x": lambda *_: 0}) == 0


def test_float_result_becomes_int() -> None:
    # a float, deliberately: a strategy typed to return int may still hand back any number
    strategies = {"x": lambda *_: 12.7}
    delay = backoff_delay({"type": "x"}, 1, strategies=strategies)  # type: ignore[arg-type]
    assert delay == 12
    assert isinstance(delay, int)


def test_unknown_strategy_is_named() -> None:
    name = unique_name()
    with pytest.raises(InvalidOptionsError, match=name):
        backoff_delay({"type": name}, 1)


@pytest.mark.parametrize("name", ["fixed", "exponential"])
def test_built_in_names_cannot_be_replaced(name: str) -> None:
    with pytest.raises(InvalidOptionsError, match=name):
        register_backoff_strategy(name, lambda *_: 1)


def test_reconnect_delays_double_with_jitter_up_to_the_cap() -> None:
    reconnect = Reconnect(first_s=0.05, cap_s=2.0, rng=random.Random(7))
    assert reconnect.delay() == 0.0
    ceilings = []
    for _ in range(10):
        reconnect.failures += 1
        delay = reconnect.delay()
        ceiling = min(2.0, 0.05 * 2 ** (reconnect.failures - 1))
        assert ceiling / 2 <= delay <= ceiling
        ceilings.append(ceiling)
    assert ceilings[-1] == 2.0
    reconnect.succeeded()
    assert reconnect.delay() == 0.0


async def test_reconnect_counts_one_failure_per_due_attempt() -> None:
    reconnect = Reconnect(first_s=10.0, cap_s=10.0)
    reconnect.failed()
    reconnect.failed()  # a call that was already in flight: no longer delay
    assert reconnect.failures == 1
    reconnect.succeeded()
    await reconnect.wait()  # nothing failed since: returns at once


async def test_until_done_calls_again_while_the_store_is_unreachable() -> None:
    from psyq.errors import ConnectionError as Unreachable
    from psyq.rules.reconnect import until_done

    outcomes: list[Exception | None] = [Unreachable("redis://x", "down"), OSError("reset"), None]
    heard: list[BaseException] = []

    async def call() -> str:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return "landed"

    pace = Reconnect(first_s=0.001, cap_s=0.002)
    assert await until_done(call, (OSError,), heard.append, pace) == "landed"
    assert [type(error) for error in heard] == [Unreachable, OSError]


async def test_until_done_lets_other_errors_through() -> None:
    from psyq.rules.reconnect import until_done

    async def call() -> None:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError, match="a bug"):
        await until_done(call, (OSError,))
