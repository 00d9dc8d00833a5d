"""`postgresql://...?layout=bullmq`: queues stored in BullMQ 6's own Postgres layout, shared
with Node BullMQ 6 and bullmq for Python (docs/architecture.md).

The schema is BullMQ's (its migrations, its ledger); every transition is one statement
over the layout's functions, so psyq follows the layout's lock protocol. The backend is put
together from one class per concern, each in its own module:

    schema.py       the ledger: check it, apply BullMQ's migrations from the bullmq package
    connection.py   pool, named statements (sql/), the layout's error codes, job rows
    listen.py       LISTEN bullmq_jobs / bullmq_events
    adding.py       add_jobs
    flows.py        add_flow, the tree, dependencies, children's values
    transitions.py  fetch, wait, settle (with fetch-next), retries, locks, stalls
    fastpath.py     psyq's set-based add, complete and take for plain jobs (sql/fast.sql)
    jobs.py         progress, data, logs, priority, delay, promote, reprocess, remove
    queries.py      jobs, states, counts, logs, queue list
    admin.py        pause/resume/drain/clean/obliterate, bulk retry and promote
    events.py       the events stream (QueueEvents)
    schedulers.py   job schedulers (cron times computed here, the next run added on take)
    transfer.py     export / import pages and queue metadata (psyq migrate)
    registry.py     psyq's worker registry and cancellations (psyq_* tables)
"""

from __future__ import annotations

from psyq.backends.postgres.bullmq.adding import Adding
from psyq.backends.postgres.bullmq.admin import Admin
from psyq.backends.postgres.bullmq.events import Events
from psyq.backends.postgres.bullmq.flows import Flows
from psyq.backends.postgres.bullmq.jobs import JobMutations
from psyq.backends.postgres.bullmq.queries import Queries
from psyq.backends.postgres.bullmq.registry import Registry
from psyq.backends.postgres.bullmq.transfer import Transfer
from psyq.backends.postgres.bullmq.transitions import Transitions

__all__ = ["BullmqPostgresBackend"]


class BullmqPostgresBackend(
    Flows, Adding, Transitions, JobMutations, Queries, Admin, Events, Transfer, Registry
):
    """BullMQ 6's Postgres layout (see the top for where each part lives)."""

    kind = "postgres"
