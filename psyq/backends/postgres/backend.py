"""`postgresql://`: queues stored in BullMQ 6's own Postgres layout, shared with Node
BullMQ 6 and bullmq for Python (design record 0002).

The schema is BullMQ's (its migrations, its ledger); every transition is one statement:
the layout's own function, or, for plain jobs, psyq's set-based statements that write the
same rows and events and take the same locks (fastpath.py), so psyq follows the layout's
lock protocol. The backend is put together from one class per concern, each in its own
module:

    config.py       the URL's parameters
    schema.py       the ledger: check it, apply BullMQ's migrations from the bullmq package
    statements.py   the named SQL of sql/*.sql
    retry.py        which server errors a statement is run again after
    connection.py   pool, named statements (sql/), the layout's error codes, job rows
    transaction.py  the same statements on the application's own transaction (asyncpg,
                    psycopg 3), for `transaction=` and Job.complete_in
    listen.py       LISTEN bullmq_jobs / bullmq_events
    adding.py       add_jobs
    flows.py        add_flow, the tree, dependencies, children's values
    transitions.py  fetch, wait, settle (with fetch-next), retries, locks, stalls
    group_taking.py the take's group part (round robin over ready groups), its waits
    groups.py       group settings, pause/resume, getters, maxSize (sql/groups.sql)
    group_admin.py  drain, clean, obliterate and the queue's meta, with the groups
    fastpath.py     psyq's set-based add, complete and take for plain jobs (sql/fast.sql)
    jobs.py         progress, data, logs, priority, delay, promote, reprocess, remove
    queries.py      jobs, states, counts, logs, queue list
    admin.py        pause/resume/drain/clean/obliterate, bulk retry and promote
    events.py       the events stream (QueueEvents)
    readers.py      a queue's event policy (always / when-read) and its readers' leases
    schedulers.py   job schedulers (cron times computed here, the next run added on take)
    transfer.py     export / import pages and queue metadata (psyq migrate)
    registry.py     psyq's worker registry and cancellations (psyq_* tables)
    presence.py     a named idle session per worker, so Node BullMQ's getWorkers lists it
"""

from __future__ import annotations

from psyq.backends.postgres.adding import Adding
from psyq.backends.postgres.admin import Admin
from psyq.backends.postgres.events import Events
from psyq.backends.postgres.flows import Flows
from psyq.backends.postgres.group_admin import GroupQueueAdmin
from psyq.backends.postgres.group_taking import GroupTaking
from psyq.backends.postgres.groups import GroupAdmin
from psyq.backends.postgres.jobs import JobMutations
from psyq.backends.postgres.queries import Queries
from psyq.backends.postgres.registry import Registry
from psyq.backends.postgres.transfer import Transfer
from psyq.backends.postgres.transitions import Transitions

__all__ = ["PostgresBackend"]


class PostgresBackend(
    Flows,
    GroupAdmin,
    Adding,
    GroupTaking,
    Transitions,
    JobMutations,
    Queries,
    GroupQueueAdmin,
    Admin,
    Events,
    Transfer,
    Registry,
):
    """BullMQ 6's Postgres layout (see the top for where each part lives)."""

    kind = "postgres"
