"""The psyq exception tree.

Every error names the value that caused it.

    PsyqError
    ├── InvalidOptionsError        a job/queue/worker option with an unknown name or a bad value
    ├── InvalidDataError           job data or a return value that is not JSON, or too large
    ├── InvalidURLError            a connection URL no backend handles
    ├── ConnectionError            a backend that cannot be reached (URL shown without password)
    ├── JobNotFoundError           no job with that id in that queue
    ├── JobStateError              the job is not in a state that allows the operation
    ├── LockError                  the caller does not hold the job's lock (late completion)
    ├── TransactionError           a `transaction=` the backend cannot write on (named)
    ├── JobVetoedError             an add-side plugin refused the job
    ├── JobCancelledError          the job was cancelled while it ran (queue.cancel_job); no retry
    ├── JobFailedError             job.wait_until_finished: the job failed (its failedReason)
    ├── GroupMaxSizeExceededError  an add past its group's maxSize; nothing was added
    ├── UnsupportedError           the backend does not implement this part of the model yet
    ├── ClosedError                the Queue / Worker / backend was closed
    └── ProcessorSignal            raised by a processor to steer what happens to its job
        ├── UnrecoverableError     fail now, no retry
        ├── DelayedError           the job was moved to delayed (job.move_to_delayed)
        ├── WaitingChildrenError   the job waits for its children (job.move_to_waiting_children)
        └── RateLimitError         the queue is rate limited (worker.rate_limit); no attempt counted
"""

from __future__ import annotations

import builtins
from urllib.parse import urlsplit

__all__ = [
    "ClosedError",
    "ConnectionError",
    "DelayedError",
    "GroupMaxSizeExceededError",
    "InvalidDataError",
    "InvalidOptionsError",
    "InvalidURLError",
    "JobCancelledError",
    "JobFailedError",
    "JobNotFoundError",
    "JobStateError",
    "JobVetoedError",
    "LockError",
    "ProcessorSignal",
    "PsyqError",
    "RateLimitError",
    "TransactionError",
    "UnrecoverableError",
    "UnsupportedError",
    "WaitingChildrenError",
    "redact_url",
]


class PsyqError(Exception):
    """Base of every error psyq raises."""


class InvalidOptionsError(PsyqError, ValueError):
    """An option has an unknown name or a bad value; the message names it."""

    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class GroupMaxSizeExceededError(PsyqError):
    """An add would put more jobs in a group than its `maxSize` allows; nothing was added
    (BullMQ Pro's GroupMaxSizeExceededError)."""

    def __init__(self, queue: str, group_id: str, max_size: int) -> None:
        super().__init__(
            f"group {group_id!r} of queue {queue!r} already holds {max_size} waiting jobs "
            f"(its maxSize); nothing was added"
        )
        self.queue = queue
        self.group_id = group_id
        self.max_size = max_size


class InvalidDataError(PsyqError, ValueError):
    """Job data or a return value cannot be stored (not JSON, or over the size limit)."""


class InvalidURLError(PsyqError, ValueError):
    """No backend handles this connection URL."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"invalid connection URL {redact_url(url)!r}: {reason}")
        self.url = redact_url(url)


class ConnectionError(PsyqError, builtins.ConnectionError):
    """The backend cannot be reached. The URL is shown without its password."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {redact_url(url)}: {reason}")
        self.url = redact_url(url)


class JobNotFoundError(PsyqError, LookupError):
    """No job with this id exists in this queue."""

    def __init__(self, queue_name: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found in queue {queue_name!r}")
        self.queue_name = queue_name
        self.job_id = job_id


class JobStateError(PsyqError):
    """The job is not in a state that allows this operation."""

    def __init__(self, job_id: str, state: str, operation: str) -> None:
        super().__init__(f"cannot {operation} job {job_id!r}: it is {state}")
        self.job_id = job_id
        self.state = state
        self.operation = operation


class LockError(PsyqError):
    """The caller does not hold the job's lock (it expired or another worker took the job)."""

    def __init__(self, job_id: str, operation: str, reason: str = "lock mismatch") -> None:
        super().__init__(f"cannot {operation} job {job_id!r}: {reason}")
        self.job_id = job_id
        self.operation = operation


class TransactionError(PsyqError, ValueError):
    """A `transaction=` connection psyq cannot write the jobs on (another backend, another
    database or server, no open transaction, an unknown driver); nothing was written."""

    def __init__(self, transaction: object, reason: str) -> None:
        super().__init__(f"cannot use transaction={transaction!r}: {reason}")
        self.transaction = transaction


class JobVetoedError(PsyqError):
    """An add-side plugin refused the job; nothing was written."""


class JobCancelledError(PsyqError):
    """The job was cancelled with `queue.cancel_job` while it ran; it fails, not retried."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r} was cancelled: {reason}")
        self.job_id = job_id
        self.reason = reason


class JobFailedError(PsyqError):
    """`job.wait_until_finished`: the job failed; `reason` is its failedReason."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r} failed: {reason}")
        self.job_id = job_id
        self.reason = reason


class UnsupportedError(PsyqError, NotImplementedError):
    """The backend does not implement this part of the model."""

    def __init__(self, backend: str, feature: str) -> None:
        super().__init__(f"the {backend} backend does not support {feature} yet")
        self.backend = backend
        self.feature = feature


class ClosedError(PsyqError, RuntimeError):
    """The object was closed and cannot be used any more."""


class ProcessorSignal(PsyqError):
    """Raised by a processor to steer what happens to its job instead of failing it."""


class UnrecoverableError(ProcessorSignal):
    """Fail the job now, whatever attempts remain."""


class DelayedError(ProcessorSignal):
    """The processor moved the job to delayed (`job.move_to_delayed`); do not settle it."""


class WaitingChildrenError(ProcessorSignal):
    """The processor moved the job to waiting-children; do not settle it."""


class RateLimitError(ProcessorSignal):
    """The queue is rate limited (`worker.rate_limit(ms)`): the job goes back, no attempt used."""


# query parameters that carry a secret (psyq://host?token=, postgresql://host?password=)
SECRET_PARAMETERS = frozenset({"token", "password", "sslpassword"})


def redact_url(url: str) -> str:
    """Return `url` with any password (`user:PASSWORD@`, `:TOKEN@`) and any secret query
    parameter (`?token=`, `?password=`) replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    original = parts
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{netloc}")
    if parts.query:
        pairs = [pair.partition("=") for pair in parts.query.split("&")]
        masked = [
            (name, sep, "***" if name.lower() in SECRET_PARAMETERS and value else value)
            for name, sep, value in pairs
        ]
        parts = parts._replace(query="&".join("".join(pair) for pair in masked))
    if parts == original:
        return url
    text = f"{parts.scheme}://{parts.netloc}{parts.path}"  # urlunsplit drops sqlite:///'s //
    return (
        text
        + (f"?{parts.query}" if parts.query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )
