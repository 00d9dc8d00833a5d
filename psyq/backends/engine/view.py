"""What the pieces of a queue's store see of what lies above them, as narrow Protocols.

A store's structures (`state.py`) hold their engine, and the flow and scheduler functions
reach other queues through it and add jobs through the store; `engine.py` builds stores and
`store.py` calls those functions. Naming the few members each side uses, instead of the
concrete `Engine` and `QueueStore`, keeps the arrows pointing one way: engine -> store ->
flows / schedulers / state -> view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from psyq.backends.records import JobRecord, NewJob
from psyq.rules.clock import Clock

__all__ = ["Adding", "EngineView"]

Store = TypeVar("Store")


class EngineView(Protocol[Store]):
    """A store's view of its engine (`Engine`), `Store` being the type of the stores."""

    @property
    def clock(self) -> Clock: ...

    @property
    def all_locked(self) -> bool:
        """Whether one caller holds every lock (a cross-queue transition may run)."""

    @property
    def touched(self) -> set[Store]:
        """The stores a cross-queue transition made ready: woken when the locks go."""

    def existing_store(self, key: str) -> Store | None: ...


class Adding(Protocol):
    """A queue's store as the schedulers and a flow's tree use it: its jobs and
    schedulers, adding and removing a job (`QueueStore`)."""

    key: str
    jobs: dict[str, JobRecord]
    schedulers: dict[str, dict[str, Any]]

    def changed(self) -> None: ...

    def add(self, new: NewJob, now: int, hold: bool = False) -> JobRecord: ...

    def remove_job(self, job_id: str, remove_children: bool) -> bool: ...

    def check_group_sizes(self, jobs: Sequence[NewJob]) -> None: ...
