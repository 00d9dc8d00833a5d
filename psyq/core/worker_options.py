"""`WorkerOptions`: a Worker's options as one validated value.

`WorkerOptions.create` is the one place a worker's options are checked and completed (a bad
value raises `InvalidOptionsError` naming it); the value is frozen, so what the parts read
is what was checked. A change (`worker.lock_duration = 1`, `worker.concurrency = 4`)
builds a new value through `changed`, checked the same way: the Worker's option attributes
are `OptionAttribute`s over its `options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Generic, Protocol, TypeVar, overload

from psyq.backends.base import GroupLimits, Limiter
from psyq.core.options import check_group_limits, check_keep, check_limiter
from psyq.errors import InvalidOptionsError
from psyq.rules.limits import check_int

__all__ = ["OptionAttribute", "OptionsHolder", "WorkerOptions"]

Keep = bool | int | dict[str, Any] | None  # a removeOnComplete / removeOnFail value
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What tunes a Worker (the collaborators — processor, connection, plugins, backoff
    strategies — are wired by the Worker, not held here). Build it with `create`."""

    concurrency: int = 1
    limiter: Limiter | None = None
    lock_duration: int = 30_000
    lock_renew_time: int = 15_000  # create: half the lock duration unless given
    stalled_interval: int = 30_000
    max_stalled_count: int = 1
    drain_delay: float = 5.0  # seconds a fetcher waits for a job before asking again
    autorun: bool = True
    worker_name: str | None = None
    skip_stalled_check: bool = False
    skip_lock_renewal: bool = False
    # BullMQ's worker options: retention for jobs without their own removeOn* option
    remove_on_complete: Keep = None
    remove_on_fail: Keep = None
    # BullMQ Pro's `group` worker option: limits per group of jobs
    group: GroupLimits | None = None

    @classmethod
    def create(
        cls,
        *,
        concurrency: int = 1,
        limiter: Mapping[str, Any] | Limiter | None = None,
        lock_duration: int = 30_000,
        lock_renew_time: int | None = None,
        stalled_interval: int = 30_000,
        max_stalled_count: int = 1,
        drain_delay: float = 5.0,
        autorun: bool = True,
        worker_name: str | None = None,
        skip_stalled_check: bool = False,
        skip_lock_renewal: bool = False,
        remove_on_complete: bool | int | Mapping[str, Any] | None = None,
        remove_on_fail: bool | int | Mapping[str, Any] | None = None,
        group: Mapping[str, Any] | GroupLimits | None = None,
    ) -> WorkerOptions:
        """The options, checked (each bad value named) and completed."""
        concurrency = check_int("concurrency", concurrency, minimum=1)
        checked_limiter = check_limiter(limiter)
        keep_completed = check_keep("remove_on_complete", remove_on_complete)
        keep_failed = check_keep("remove_on_fail", remove_on_fail)
        lock_duration = check_int("lock_duration", lock_duration, minimum=1)
        renew = lock_renew_time or max(1, lock_duration // 2)
        if not isinstance(drain_delay, int | float) or drain_delay <= 0:
            raise InvalidOptionsError(f"drain_delay must be > 0 seconds, got {drain_delay!r}")
        return cls(
            concurrency=concurrency,
            limiter=checked_limiter,
            lock_duration=lock_duration,
            lock_renew_time=check_int("lock_renew_time", renew, minimum=1),
            stalled_interval=check_int("stalled_interval", stalled_interval, minimum=1),
            max_stalled_count=check_int("max_stalled_count", max_stalled_count),
            drain_delay=float(drain_delay),
            autorun=autorun,
            worker_name=worker_name,
            skip_stalled_check=skip_stalled_check,
            skip_lock_renewal=skip_lock_renewal,
            remove_on_complete=keep_completed,
            remove_on_fail=keep_failed,
            group=check_group_limits(group),
        )

    def changed(self, **values: Any) -> WorkerOptions:
        """These options with `values` in place, checked as `create` checks them."""
        given = {field.name: getattr(self, field.name) for field in fields(self)}
        return WorkerOptions.create(**{**given, **values})


class OptionsHolder(Protocol):
    """What holds a `WorkerOptions` (the Worker) for its `OptionAttribute`s."""

    options: WorkerOptions


class OptionAttribute(Generic[T]):
    """A Worker attribute that reads its `options` and, set, replaces them with a checked
    copy (`worker.lock_duration = 1` as before, now refused when out of range)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, worker: None, owner: type) -> OptionAttribute[T]: ...

    @overload
    def __get__(self, worker: OptionsHolder, owner: type) -> T: ...

    def __get__(self, worker: OptionsHolder | None, owner: type) -> OptionAttribute[T] | T:
        if worker is None:
            return self
        value: T = getattr(worker.options, self._name)
        return value

    def __set__(self, worker: OptionsHolder, value: T) -> None:
        worker.options = worker.options.changed(**{self._name: value})
