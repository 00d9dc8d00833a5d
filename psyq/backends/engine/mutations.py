"""`Mutations`: changes to one job outside its path of life (logs, progress, data,
priority, delay, promote, reprocess) and to the whole queue (pause, drain, clean, retry and
promote all)."""

from __future__ import annotations

from typing import Any

from psyq.backends.base import JobRecord
from psyq.backends.engine.queries import Queries
from psyq.errors import JobStateError, PsyqError

__all__ = ["Mutations"]

PAGE = 500  # jobs read from a persisted store's file at once by a loop over many


class Mutations(Queries):
    """A queue's changes outside the transitions of a job's life (QueueStore adds those)."""

    # ------------------------------------------------------------------ job mutations
    def add_log(self, job_id: str, row: str, keep: int | None) -> int:
        self.record(job_id)
        self.mark(job_id)
        rows = self.logs.setdefault(job_id, [])
        rows.append(row)
        if keep is not None and len(rows) > keep:
            del rows[: len(rows) - keep]
        return len(rows)

    def clear_logs(self, job_id: str, keep: int) -> None:
        if self.jobs.get(job_id) is None:
            return
        rows = self.logs.get(job_id)
        if rows is not None:
            del rows[: max(0, len(rows) - keep)]
            self.mark(job_id)

    def update_progress(self, job_id: str, progress: Any, text: str) -> None:
        self.record(job_id).progress = progress
        self.mark(job_id)
        self.emit("progress", job_id, text)

    def update_data(self, job_id: str, data: str) -> None:
        self.record(job_id).data = data
        self.mark(job_id)

    def change_priority(self, job_id: str, priority: int, lifo: bool) -> None:
        record = self.record(job_id)
        self.mark(job_id)
        record.priority = priority
        record.opts = {**record.opts, "priority": priority}
        if record.state in ("waiting", "prioritized"):
            self._detach(record)
            self._enqueue(record, lifo)

    def delayed_record(self, job_id: str, operation: str) -> JobRecord:
        record = self.record(job_id)
        if record.state != "delayed":
            raise JobStateError(job_id, f"{record.state}, not delayed", operation)
        return record

    def change_delay(self, job_id: str, delay: int, now: int) -> None:
        record = self.delayed_record(job_id, "change the delay of")
        self._detach(record)
        record.delay = delay
        self._delay(record, now + delay)

    def promote(self, job_id: str) -> None:
        record = self.delayed_record(job_id, "promote")
        self._detach(record)
        record.delay = 0
        self.to_wait(record, "delayed")

    def reprocess_job(
        self, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        record = self.record(job_id)
        if record.state != state:
            raise JobStateError(job_id, f"{record.state}, not {state}", "retry")
        self._detach(record)
        if made:
            record.attempts_made = 0
        if started:
            record.attempts_started = 0
        record.finished_on = None
        record.processed_on = None
        if state == "completed":
            record.returnvalue = None
        else:
            record.failed_reason = None
        self.to_wait(record, state)

    # ------------------------------------------------------------------ queue admin
    def set_paused(self, paused: bool) -> None:
        if self.paused != paused:
            self.paused = paused
            self.changed()
            self.emit("paused" if paused else "resumed")

    def remove_rate_limit(self, now: int) -> bool:
        """BullMQ's removeRateLimitKey: the limit and the limiter window's count go; True
        when the queue was rate-limited."""
        limited = self.limited_until > now
        self.limited_until = self.window_start = self.window_count = 0
        self.changed()
        return limited

    def drain(self, delayed: bool) -> None:
        doomed = list(self.wait) + [entry[2] for entry in self.prio.ordered()]
        self.wait.clear()  # the lines at once, not job by job (a deque's remove is O(n))
        self.prio.clear()
        doomed += self.groups.clear()
        if delayed:
            doomed += [entry[2] for entry in self.delayed]
            self.delayed.clear()
            self.delayed_key.clear()
        for start in range(0, len(doomed), PAGE):
            page = doomed[start : start + PAGE]
            self.preload(page)
            for job_id in page:
                record = self.jobs[job_id]
                record.state = None  # out of its line already
                self._drop(record)

    def clean(self, grace: int, limit: int, state: str, now: int) -> list[str]:
        cutoff = now - grace
        removed: list[str] = []
        for job_id in self.iterate_ids(state, asc=True):
            if limit and len(removed) >= limit:
                break
            record = self.jobs[job_id]
            stamp = record.finished_on if state in ("completed", "failed") else record.timestamp
            if (stamp or 0) <= cutoff:
                self._drop(record)
                removed.append(job_id)
        self.emit("cleaned", None, {"count": str(len(removed))})
        return removed

    def check_obliterate(self, force: bool) -> None:
        if self.active and not force:
            raise PsyqError(
                f"cannot obliterate queue {self.name!r}: {len(self.active)} jobs are active "
                "(close their workers first, or pass force=True)"
            )

    def retry_jobs(self, state: str, count: int, before: int) -> int:
        moved = 0
        for job_id in self.iterate_ids(state, asc=True):
            if count and moved >= count:
                break
            if (self.jobs[job_id].finished_on or 0) <= before:
                self.reprocess_job(job_id, state)
                moved += 1
        return moved

    def promote_jobs(self, count: int) -> int:
        moved = 0
        while self.delayed and (not count or moved < count):
            self.promote(self.delayed[0][2])
            moved += 1
        return moved
