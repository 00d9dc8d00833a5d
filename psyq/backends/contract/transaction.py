"""The contract's InTransaction group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.records import (
    Completed,
    FlowNode,
    JobRecord,
    NewJob,
)
from psyq.errors import TransactionError

__all__ = ["InTransaction"]


class InTransaction(AdapterRoot):
    """Writing on a connection the application holds inside an open transaction
    (`transaction`): the jobs (or the completion) are visible when it commits. Only a backend
    that stores its queues in the application's own database can (Postgres); the others
    refuse with `TransactionError`. These methods take an object of the caller's process, so
    no remote protocol carries them (`IN_TRANSACTION`)."""

    async def add_jobs_in(
        self, transaction: object, queue: str, jobs: Sequence[NewJob]
    ) -> list[JobRecord]:
        """As add_jobs, written on `transaction`."""
        raise self._no_transactions(transaction)

    async def add_flow_in(self, transaction: object, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """As add_flow, written on `transaction`."""
        raise self._no_transactions(transaction)

    async def complete_in(
        self, transaction: object, queue: str, job_id: str, token: str, outcome: Completed
    ) -> None:
        """Complete an active job on `transaction`, its lock checked there (LockError when
        `token` no longer holds it)."""
        raise self._no_transactions(transaction)

    def _no_transactions(self, transaction: object) -> TransactionError:
        return TransactionError(
            transaction, f"the {self.kind} backend ({self.safe_url}) cannot write in it"
        )
