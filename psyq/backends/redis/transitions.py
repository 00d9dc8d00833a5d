"""Job state transitions: fetching (several jobs per call; waiting on the marker with
BZPOPMIN), settling (several jobs and a fetch of the next per call), locks, stalls, and
the transitions of single jobs (progress, logs, data, priority, delay, promote, remove)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from psyq.backends.base import (
    Completed,
    Failed,
    FetchRequest,
    JobRecord,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)
from psyq.backends.redis.connection import (
    CONNECTION_ERRORS,
    PSYQ_WORKER_SUFFIX,
    worker_client_name,
)
from psyq.backends.redis.jobs import (
    SKIP_LOCK_TOKEN,
    record_from_fields,
)
from psyq.backends.redis.schedulers import Schedulers
from psyq.errors import ConnectionError, PsyqError
from psyq.rules import codec

# Completions a backend remembers as sent in a call whose reply never came (a bound: an
# outage fails many calls in a row).
MAX_LOST_SETTLES = 10_000


class Transitions(Schedulers):
    """Fetching, settling and the transitions of single jobs."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # (queue, job id) of the completions of settle calls that failed: sent again, each
        # carries its job's lease start, by which moveToFinished recognises a completion
        # the lost call made of a job its retention then removed (finish.lua)
        self._lost_settles: dict[tuple[str, str], None] = {}

    @staticmethod
    def _fetch_arg(request: FetchRequest) -> dict[str, Any]:
        arg: dict[str, Any] = {
            "tokens": list(request.tokens),
            "lockDuration": request.lock_duration,
            "worker": request.worker_name or "",
        }
        if request.limiter is not None:
            arg["max"] = request.limiter.max
            arg["duration"] = request.limiter.duration
        if request.held:  # a lost reply's jobs are handed over first (take.lua heldJobs)
            arg["held"] = list(request.held)
        group = request.group  # the worker's limits per group (groups.lua groupLimits)
        if group is not None:
            if group.concurrency is not None:
                arg["gconc"] = group.concurrency
            if group.limiter is not None:
                arg["gmax"] = group.limiter.max
                arg["gduration"] = group.limiter.duration
        return arg

    def _records(
        self, queue: str, hashes: Sequence[Sequence[str]], tokens: Sequence[str]
    ) -> list[JobRecord]:
        """The fetched jobs: the held ones (their hash ends "__token", token), then the
        ones taken, locked with `tokens` in order."""
        records = []
        fresh = iter(tokens)
        for flat in hashes:
            record = record_from_fields(queue, flat, "active")
            held = len(flat) > 1 and flat[-2] == "__token"
            record.lock_token = flat[-1] if held else next(fresh, None)
            records.append(record)
        return records

    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        if not request.tokens:
            return []
        arg = json.dumps(self._fetch_arg(request))
        hashes = await self._run("moveToActive", queue, arg)
        records = self._records(queue, hashes, request.tokens)
        await self._schedule_next_shielded(queue, records)
        return records

    async def _schedule_next_shielded(self, queue: str, records: list[JobRecord]) -> None:
        """Add the next runs of the schedulers whose runs were just fetched, to the end even
        when the caller is cancelled (a closing worker): else a scheduler would stop."""
        if any(record.id.startswith("repeat:") for record in records):
            await asyncio.shield(self._schedule_next(queue, records))

    def _block_timeout(self, block_ms: int) -> float:
        """BZPOPMIN's timeout in seconds (never 0, which would block forever)."""
        if self._whole_second_timeouts:
            return float(max(1, -(-block_ms // 1000)))
        return max(block_ms, 1) / 1000

    def _waiting_client(self, queue: str) -> Any:
        """The connections workers of `queue` block on, named as BullMQ names a named
        worker's (`<prefix>:<base64(queue)>:w:psyq`), so BullMQ's getWorkers (CLIENT LIST)
        sees them."""
        if self._client is None:
            raise PsyqError(f"the Redis backend {self.safe_url!r} is not open")
        client = self._waiting.get(queue)
        if client is None:
            name = worker_client_name(self.prefix, queue) + PSYQ_WORKER_SUFFIX
            client = self._waiting[queue] = self._new_client(blocking=True, name=name)
        return client

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """Block on the queue's marker until work may be ready. A popped delay marker (member
        "1", scored with a future due time) only shortens the next block: other markers
        (an add, a promotion) may come first."""
        blocking = self._waiting_client(queue)
        marker = self.queue_key(queue) + ":marker"
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            hint = int(await self._run("getWaitHint", queue))
            left_ms = int((deadline - time.monotonic()) * 1000)
            if hint == 0 or left_ms <= 0:
                return
            block_ms = left_ms if hint < 0 else min(left_ms, hint)
            try:
                popped = await self._uncancelled(
                    blocking.bzpopmin(marker, self._block_timeout(block_ms))
                )
            except CONNECTION_ERRORS as exc:
                raise self._lost(f"waiting on {marker!r}", exc) from exc
            if popped is None or popped[1] != "1":
                return

    @staticmethod
    def _settle_item(
        job_id: str, token: str, outcome: Completed | Failed | Retry
    ) -> dict[str, Any]:
        item: dict[str, Any]
        if isinstance(outcome, Completed):
            item = {"id": job_id, "token": token, "kind": "completed", "value": outcome.returnvalue}
        else:
            item = {
                "id": job_id,
                "token": token,
                "kind": "retry" if isinstance(outcome, Retry) else "failed",
                "value": outcome.reason,
                "stack": json.dumps(list(outcome.stacktrace)),
            }
            if isinstance(outcome, Retry):
                item["delay"] = outcome.delay
                return item
        if outcome.keep is not None:  # the worker's default retention
            item["keep"] = outcome.keep
        return item

    async def _settle(
        self, queue: str, items: list[dict[str, Any]], fetch: FetchRequest | None
    ) -> tuple[list[Any], list[JobRecord]]:
        """(each job's code, as the script returned it: see _settle_code), fetched jobs."""
        arg: dict[str, Any] = {"settle": items}
        if fetch is not None and fetch.tokens:
            arg["fetch"] = self._fetch_arg(fetch)
        codes, hashes = await self._run("moveToFinished", queue, json.dumps(arg))
        fetched = self._records(queue, hashes, fetch.tokens) if fetch is not None else []
        await self._schedule_next_shielded(queue, fetched)
        return list(codes), fetched

    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        """One moveToFinished call (workers batch their settles through settle_many:
        psyq.core.settle_batch)."""
        [code], fetched = await self._settle(
            queue, [self._settle_item(job_id, token, outcome)], fetch
        )
        operation = "complete" if isinstance(outcome, Completed) else "fail"
        raise_for_code(_settle_code(code, queue), queue, job_id, operation, "not active")
        return fetched

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        [code], _ = await self._settle(queue, [self._settle_item(job_id, token, outcome)], None)
        raise_for_code(_settle_code(code, queue), queue, job_id, "retry", "not active")

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        lost = self._lost_settles
        items = [self._settle_item(s.job_id, s.token, s.outcome) for s in settlements]
        if lost:  # sent again after a failed call: with their lease's start (finish.lua)
            for item, settlement in zip(items, settlements, strict=True):
                if lost.pop((queue, settlement.job_id), False) is None:
                    item["started"] = settlement.started
        try:
            codes, fetched = await self._settle(queue, items, fetch)
        except ConnectionError:  # it may have run, its reply lost
            lost.update(((queue, s.job_id), None) for s in settlements if s.started is not None)
            while len(lost) > MAX_LOST_SETTLES:
                del lost[next(iter(lost))]
            raise
        errors: list[PsyqError | None] = []
        for settlement, code in zip(settlements, codes, strict=True):
            try:
                code = _settle_code(code, queue)
                raise_for_code(code, queue, settlement.job_id, "settle", "not active")
                errors.append(None)
            except PsyqError as exc:
                errors.append(exc)
        return errors, fetched

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        held = SKIP_LOCK_TOKEN if token is None else token
        await self._run_code("moveToDelayed", queue, job_id, "delay", timestamp_ms, held)

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        await self._run_code("moveJobFromActiveToWait", queue, job_id, "hand back", token)

    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        pairs = [part for job_id, token in locks.items() for part in (job_id, token)]
        lost = await self._run("extendLocks", queue, duration_ms, *pairs)
        return [str(job_id) for job_id in lost]

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        moved, failed = await self._run("moveStalledJobsToWait", queue, max_stalled_count)
        return StalledResult([str(i) for i in moved], [str(i) for i in failed])

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        code = await self._run_code(
            "moveToWaitingChildren", queue, job_id, "move to waiting-children", token
        )
        return code == 1

    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        text = codec.dumps(progress, "progress", job_id)
        await self._run_code("updateProgress", queue, job_id, "update progress of", text)

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        keep = "" if keep_logs is None else keep_logs
        return await self._run_code("addLog", queue, job_id, "log to", row, keep)

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        key = f"{self.queue_key(queue)}:{job_id}:logs"
        if keep <= 0:
            await self.client.delete(key)
        else:
            await self.client.ltrim(key, -keep, -1)

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        await self._run_code("updateData", queue, job_id, "update data of", data)

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        await self._run_code(
            "changePriority", queue, job_id, "change priority of", priority, int(lifo)
        )

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        code = int(await self._run("changeDelay", queue, job_id, delay_ms))
        raise_for_code(code, queue, job_id, "change the delay of", "not delayed")

    async def promote(self, queue: str, job_id: str) -> None:
        code = int(await self._run("promote", queue, job_id, 0))
        raise_for_code(code, queue, job_id, "promote", "not delayed")

    async def reprocess_job(
        self, queue: str, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        flags = (int(made), int(started))
        code = int(await self._run("reprocessJob", queue, state, job_id, 0, 0, *flags))
        raise_for_code(code, queue, job_id, "retry", f"not {state}")

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        return bool(await self._run("removeJob", queue, job_id, int(remove_children)))


def _settle_code(code: Any, queue: str) -> int:
    """A moveToFinished code: an int, or the message of an error raised settling that job."""
    if isinstance(code, str) and code.startswith("ERR "):
        raise PsyqError(f"Redis script moveToFinished failed on queue {queue!r}: {code[4:]}")
    return int(code)
