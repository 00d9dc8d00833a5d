"""The contract's Transitions group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.records import (
    Completed,
    Failed,
    FetchRequest,
    JobRecord,
    Retry,
    Settlement,
    StalledResult,
)
from psyq.errors import PsyqError

__all__ = ["Transitions"]


class Transitions(AdapterRoot):
    """Taking jobs and settling them: the state transitions of a job a worker holds (its lock)."""

    #: True when one `settle_many` costs less than several `move_to_finished` (a store
    #: across the network): workers then settle the completions of one event-loop turn
    #: together (psyq.core.settle_batch)
    batch_settles: bool = False
    #: With batch_settles: a turn's batch goes out as up to this many calls of at least
    #: SETTLE_GROUP_MIN settles each, sent together, so the store works on the next call while
    #: the worker runs the jobs the previous one brought back (1: one call per batch)
    settle_groups: int = 1
    #: With batch_settles: ms a completion may wait, while the worker's last take found no
    #: other job waiting, to ride on the next call that goes to the store anyway (the take
    #: a job's arrival wakes), so it costs no commit of its own; 0: end of the loop turn
    settle_linger_ms: int = 0

    @abstractmethod
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        """Promote due delayed jobs, then take up to len(tokens) jobs (plain waiting before
        prioritized; lower priority number first) and lock them. Empty when paused, limited
        or nothing is ready."""

    @abstractmethod
    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """Return when a job may be ready (added, promoted, resumed) or after timeout_ms.
        Never busy-waits; may return early (callers then fetch and find nothing)."""

    @abstractmethod
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        """Complete or fail an active job held with `token` (attempts_made + 1), apply its
        retention, and, with `fetch`, take the next jobs in the same call."""

    @abstractmethod
    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        """A failed attempt with attempts left: attempts_made + 1, back to waiting (or
        delayed by outcome.delay ms), honouring lifo/priority."""

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """Settle several jobs, then fetch. Returns one error (or None) per settlement and
        the fetched jobs. Backends override this to do it in one round trip."""
        errors: list[PsyqError | None] = []
        for item in settlements:
            try:
                if isinstance(item.outcome, Retry):
                    await self.retry_job(queue, item.job_id, item.token, item.outcome)
                else:
                    await self.move_to_finished(queue, item.job_id, item.token, item.outcome)
                errors.append(None)
            except PsyqError as exc:
                errors.append(exc)
        fetched = await self.move_to_active(queue, fetch) if fetch else []
        return errors, fetched

    @abstractmethod
    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        """Move an active job (held with `token`) to delayed until timestamp_ms; no attempt
        is counted."""

    @abstractmethod
    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        """Hand an active job back to waiting without counting an attempt made (rate limit,
        forced close); its start stays counted in `attempts_started`, as in BullMQ."""

    @abstractmethod
    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        """Extend the locks {job_id: token}; return the ids whose lock was lost."""

    @abstractmethod
    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        """Active jobs whose lock expired go back to waiting (stalled_counter + 1), or fail
        when they stalled more than max_stalled_count times."""
