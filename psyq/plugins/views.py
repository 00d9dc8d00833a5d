"""What a plugin sees: a job about to be added (`AddSpec`), and a job and a worker through
two narrow Protocols.

Hooks receive psyq's `Job` and `Worker`; the plugins name them by these views, which list
only what a hook may read (and, for a job's `data`, replace), so the plugin layer depends
on no class of psyq.core and psyq.core may import it. A plugin of your own may annotate
its hooks with them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["AddSpec", "JobView", "WorkerView"]


@dataclass
class AddSpec:
    """A job about to be added; `psyq_before_add` hooks may change it in place."""

    queue_name: str
    name: Any
    data: Any
    opts: dict[str, Any]


class JobView(Protocol):
    """A job as a hook sees it (`psyq.Job` is one)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def queue_name(self) -> str: ...

    @property
    def data(self) -> Any:
        """The job's data; a `psyq_process` hook may replace it for the layers inside."""

    @data.setter
    def data(self, value: Any) -> None: ...

    @property
    def opts(self) -> dict[str, Any]: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def delay(self) -> int: ...

    @property
    def attempts_made(self) -> int: ...

    @property
    def attempts_started(self) -> int: ...

    @property
    def processed_on(self) -> int | None: ...


class WorkerView(Protocol):
    """A worker as `psyq_worker_start`/`psyq_worker_stop` see it (`psyq.Worker` is one)."""

    @property
    def name(self) -> str:
        """The queue's name."""

    @property
    def id(self) -> str:
        """The worker's name (`worker_name`, or one made up)."""
