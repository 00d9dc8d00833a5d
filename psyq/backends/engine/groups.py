"""`GroupLines`: a queue's groups (BullMQ Pro's `group: {id}`), in memory.

Each group keeps its waiting jobs in a line of its own (FIFO; jobs with a group priority in
a heap beside it, 0 first), outside the queue's `wait`, so a take reaches them only after
the plain jobs. The groups ready to serve sit in a ring, next on the left: a take pops the
left one, takes its next job and puts it back on the right while it stays ready, so taking
from the next group is O(1). A group that is paused, rate-limited or at its concurrency
leaves the ring (lazily: found not ready when popped) and comes back when that ends: a
freed slot, a resume, or its timer (a heap of (ms, group id)). An empty group without
settings of its own is deleted once its rate window ends: it keeps nothing.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import Any

from psyq.backends.base import GroupInfo, GroupLimits, GroupSettings, Limiter
from psyq.backends.engine.heap import Heap4

__all__ = ["Group", "GroupLines"]


class Group:
    """One group: its line, its active count and its rate window."""

    __slots__ = ("active", "limited_until", "line", "opts", "prio", "window_count", "window_end")

    def __init__(self) -> None:
        self.line: deque[str] = deque()  # group priority 0, next on the left
        self.prio: Heap4 | None = None  # group priority > 0, made on first use
        # the options of its jobs added with only {"group": {"id": ...}}: one dict for all
        self.opts: dict[str, Any] | None = None
        self.active = 0
        self.window_end = 0  # ms the current rate window ends at
        self.window_count = 0  # jobs started in it
        self.limited_until = 0  # ms a full window or rate_limit_group parks it until

    def waiting(self) -> int:
        return len(self.line) + (len(self.prio) if self.prio is not None else 0)

    def ordered(self) -> Iterator[str]:
        """The waiting ids in the order they will be taken."""
        yield from self.line
        if self.prio is not None:
            yield from (entry[2] for entry in self.prio.ordered())

    def pop(self) -> str | None:
        if self.line:
            return self.line.popleft()
        return None if self.prio is None else self.prio.pop()


class GroupLines:
    """A queue's groups. Not thread-safe: the store's lock is held around every call."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.settings: dict[str, GroupSettings] = {}
        self.ring: deque[str] = deque()
        self.in_ring: set[str] = set()
        self.timers: list[tuple[int, str]] = []  # (ms, group id): look at the group again
        self.waiting = 0  # jobs in every line together
        self.seq = itertools.count(1)
        # group id -> its jobs' shared options, by the group option's items, for groups
        # given with a priority or a maxSize (the id alone: `Group.opts`)
        self.shared_opts: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}

    def add(self, opts: dict[str, Any], job_id: str) -> dict[str, Any]:
        """A new job whose only option is its group, at the back of its group's line (as
        `push`, with one call for the common case): the options its record keeps, one dict
        for the jobs of the group added with the same (the engine never changes a
        record's options in place), so a waiting grouped job costs no dict of its own.
        Kept while the group is."""
        group = opts["group"]
        gid = group["id"]
        found = self.groups.get(gid)
        if found is None:
            found = self.groups[gid] = Group()
        shared = found.opts
        if shared is opts or len(group) == 1:  # {"id": gid} (the gate shares such opts)
            if shared is None:
                shared = found.opts = opts
            found.line.append(job_id)
        else:
            mine = self.shared_opts.setdefault(gid, {})
            shared = mine.setdefault(tuple(group.items()), opts)
            priority = group.get("priority", 0)
            if priority:
                if found.prio is None:
                    found.prio = Heap4()
                found.prio.push(priority, next(self.seq), job_id)
            else:
                found.line.append(job_id)
        self.waiting += 1
        if gid not in self.in_ring:  # _ring's work inline
            self.in_ring.add(gid)
            self.ring.append(gid)
        return shared

    def __bool__(self) -> bool:
        return self.waiting > 0

    # ------------------------------------------------------------------ lines
    def push(self, gid: str, job_id: str, priority: int, front: bool) -> None:
        """Put a job in its group's line (`front`: it goes first, a job handed back)."""
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = Group()
        if priority:
            if group.prio is None:
                group.prio = Heap4()
            seq = next(self.seq)
            group.prio.push(priority, -seq if front else seq, job_id)
        elif front:
            group.line.appendleft(job_id)
        else:
            group.line.append(job_id)
        self.waiting += 1
        self._ring(gid)

    def discard(self, gid: str, job_id: str) -> None:
        """A waiting job leaves its line (removed, promoted to another state...)."""
        group = self.groups[gid]
        try:
            group.line.remove(job_id)
        except ValueError:
            assert group.prio is not None
            group.prio.discard(job_id)
        self.waiting -= 1
        self._forget_if_empty(gid, group, 0)

    def clear(self) -> list[str]:
        """Every waiting job out of every line (drain, obliterate): their ids."""
        ids = [job_id for group in self.groups.values() for job_id in group.ordered()]
        for gid, group in list(self.groups.items()):
            group.line.clear()
            group.prio = None
            self._forget_if_empty(gid, group, 0)
        self.waiting = 0
        return ids

    # ------------------------------------------------------------------ taking
    def take(self, limits: GroupLimits | None, now: int) -> tuple[str, str] | None:
        """(group id, job id) of the next job to start, round-robin over the ready
        groups, counted as active in its group; None when no group may start one."""
        if self.timers and self.timers[0][0] <= now:
            self._due(now)
        ring, groups, settings = self.ring, self.groups, self.settings
        unlimited = limits is None
        while ring:
            gid = ring.popleft()
            group = groups.get(gid)
            if group is None or not (
                (unlimited and gid not in settings and group.limited_until <= now)
                or self._may_start(gid, group, limits, now)
            ):
                self.in_ring.discard(gid)
                continue
            line = group.line
            job_id = line.popleft() if line else group.pop()
            if job_id is None:  # pragma: no cover - a ringed group has work
                self.in_ring.discard(gid)
                continue
            self.waiting -= 1
            group.active += 1
            group.window_count += 1
            if line or group.prio:
                ring.append(gid)
            else:
                self.in_ring.discard(gid)
            return gid, job_id
        return None

    def started(self, gid: str) -> None:
        """A job of the group is active that no take of this store started (a file's
        active job at open, an imported one)."""
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = Group()
        group.active += 1

    def released(self, gid: str, now: int) -> None:
        """A job of the group left active: its slot is free."""
        group = self.groups.get(gid)
        if group is None:
            return
        group.active -= 1
        if group.line or group.prio:
            self._ring(gid)
        else:
            self._forget_if_empty(gid, group, now)

    def ready_in(self, now: int) -> int | None:
        """0 when a group may have a job to start now, else ms until a timer, or None."""
        if self.ring:
            return 0
        if self.timers:
            return max(0, self.timers[0][0] - now)
        return None

    def _may_start(self, gid: str, group: Group, limits: GroupLimits | None, now: int) -> bool:
        settings = self.settings.get(gid)
        if settings is not None and settings.get("paused"):
            return False
        if group.limited_until > now:
            self._wake_at(group.limited_until, gid)
            return False
        concurrency = self._concurrency(settings, limits)
        if concurrency is not None and group.active >= concurrency:
            return False  # back in the ring when a slot frees (released)
        limiter = self._limiter(settings, limits)
        if limiter is None:
            return True
        if now >= group.window_end:
            group.window_end, group.window_count = now + limiter.duration, 0
        if group.window_count < limiter.max:
            return True
        group.limited_until = group.window_end
        self._wake_at(group.window_end, gid)
        return False

    @staticmethod
    def _concurrency(settings: GroupSettings | None, limits: GroupLimits | None) -> int | None:
        if settings is not None and "concurrency" in settings:
            return settings["concurrency"]
        return None if limits is None else limits.concurrency

    @staticmethod
    def _limiter(settings: GroupSettings | None, limits: GroupLimits | None) -> Limiter | None:
        if settings is not None and "limiter" in settings:
            max_jobs, duration = settings["limiter"]
            return Limiter(max_jobs, duration)
        return None if limits is None else limits.limiter

    # ------------------------------------------------------------------ timers
    def _wake_at(self, when: int, gid: str) -> None:
        heapq.heappush(self.timers, (when, gid))

    def _due(self, now: int) -> None:
        while self.timers and self.timers[0][0] <= now:
            _, gid = heapq.heappop(self.timers)
            group = self.groups.get(gid)
            if group is not None and group.limited_until <= now:
                if group.waiting():
                    self._ring(gid)
                else:
                    self._forget_if_empty(gid, group, now)

    def _ring(self, gid: str) -> None:
        if gid not in self.in_ring:
            self.in_ring.add(gid)
            self.ring.append(gid)

    def _forget_if_empty(self, gid: str, group: Group, now: int) -> None:
        """Delete a group with nothing left: no job waiting or active, no window open."""
        if group.active or group.waiting():
            return
        ends = max(group.window_end, group.limited_until)
        if ends > now and group.window_count:
            self._wake_at(ends, gid)  # its window still counts: look again when it ends
            return
        del self.groups[gid]
        self.in_ring.discard(gid)
        self.shared_opts.pop(gid, None)

    # ------------------------------------------------------------------ control
    def limit(self, gid: str, until: int) -> None:
        """rate_limit_group: no job of the group starts before `until`."""
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = Group()
        group.limited_until = max(group.limited_until, until)
        group.window_count = max(group.window_count, 1)  # kept until its timer
        self._wake_at(group.limited_until, gid)

    def limited_for(self, gid: str, now: int) -> int:
        group = self.groups.get(gid)
        return 0 if group is None else max(0, group.limited_until - now)

    def set(self, gid: str, name: str, value: object) -> bool:
        """Set (or, with None, remove) one of the group's own settings; True when it
        changed. A group that may serve again goes back in the ring."""
        settings = self.settings.get(gid, {})
        before = settings.get(name)
        if value is None:
            settings.pop(name, None)  # type: ignore[misc]
        else:
            settings[name] = value  # type: ignore[literal-required]
        if settings:
            self.settings[gid] = settings
        else:
            self.settings.pop(gid, None)
        group = self.groups.get(gid)
        if group is not None and group.waiting():
            self._ring(gid)
        return before != value

    def size(self, gid: str) -> int:
        """How many jobs wait in the group's line."""
        group = self.groups.get(gid)
        return 0 if group is None else group.waiting()

    def active_of(self, gid: str) -> int:
        group = self.groups.get(gid)
        return 0 if group is None else group.active

    def info(self, gid: str, limits: GroupLimits | None, now: int) -> GroupInfo:
        group = self.groups.get(gid) or Group()
        settings = self.settings.get(gid)
        concurrency = self._concurrency(settings, limits)
        if settings is not None and settings.get("paused"):
            status = "paused"
        elif group.limited_until > now:
            status = "limited"
        elif concurrency is not None and group.active >= concurrency:
            status = "full"
        else:
            status = "waiting"
        return {"id": gid, "waiting": group.waiting(), "active": group.active, "status": status}

    def listed(self) -> list[str]:
        """Every group with jobs or settings of its own, by id."""
        return sorted(self.groups.keys() | self.settings.keys())
