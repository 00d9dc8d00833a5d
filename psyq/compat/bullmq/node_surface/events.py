"""`EVENTS[listener][event]`: the events of Node BullMQ 6's listener interfaces and
the calls the layer's listeners get, and `EVENT_INHERITS`, the order a class's event is
looked up (the table: psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

from psyq.compat.bullmq.node_surface.equivalent import E, Equivalent, R

__all__ = ["EVENTS", "EVENT_INHERITS"]


# The listener interfaces of each class, in the order an event is looked up.
EVENT_INHERITS: dict[str, tuple[str, ...]] = {
    "Queue": ("QueueListener", "IoredisListener"),
    "Worker": ("WorkerListener", "IoredisListener"),
    "QueueEvents": ("QueueEventsListener", "IoredisListener"),
    "FlowProducer": ("FlowProducerListener", "IoredisListener"),
}

LISTENER_RAISED = "when a listener raises (psyq's EventEmitter reports it so)"
PREV = "`prev` only to a listener that names it (the Python package passes one less)"
FEED = "read from the queue's event feed, as every QueueEvents reads it"


def _feed(args: str, core: str, note: str = "") -> Equivalent:
    """A QueueEvents event: from the feed, `fn(args, id)` (also `<event>:<jobId>`)."""
    return E(f"fn({args}, id)", f"QueueEvents '{core}'", f"{FEED}; {note}" if note else FEED)


EVENTS: dict[str, dict[str, Equivalent]] = {
    "IoredisListener": {
        "ioredis:close": R(
            "psyq does not connect through ioredis (redis-py, psycopg, its own engine): a "
            "lost connection is an `error` on a Worker or QueueEvents (which retry until the "
            "store answers) and the exception of a Queue or FlowProducer call"
        ),
    },
    "QueueListener": {
        "cleaned": E(
            "fn(jobs, type)",
            note="once per `clean()` call, even when it removed none, with the ids and "
            "Node's state name (`waiting` is `wait`)",
        ),
        "error": E(
            "fn(error)",
            "Queue 'error'",
            f"{LISTENER_RAISED}; a failed call raises its exception (Node also emits its "
            "connection's errors here)",
        ),
        "paused": E(
            "fn()",
            note="after `pause()`, in the calling process (the feed's "
            "`paused` reaches every QueueEvents)",
        ),
        "progress": E(
            "fn(jobId, progress)",
            note="`updateJobProgress(jobId, p)` gives the id; a queue's job's own "
            "`updateProgress(p)` gives the job, as Node",
        ),
        "removed": E(
            "fn(jobId)",
            note="`remove(jobId)` when it removed the job (1); `job.remove()` gives the job",
        ),
        "resumed": E("fn()", note="after `resume()`, in the calling process"),
        "waiting": E("fn(job)", "Queue 'waiting'", "after `add` (not `addBulk`), as Node"),
    },
    "WorkerListener": {
        "active": E("fn(job, prev)", "Worker 'active'"),
        "closed": E("fn()", "Worker 'closed'", "once `close()` released everything"),
        "closing": E("fn(msg)", note="`'closing queue'` when `close()` begins, once"),
        "completed": E("fn(job, result, prev)", "Worker 'completed'", PREV),
        "drained": E(
            "fn()",
            "Worker 'drained'",
            "when a fetch finds nothing, once until a job comes; a new worker on an empty "
            "queue emits it too, as Node (psyq's own Worker starts drained: no event)",
        ),
        "error": E("fn(error)", "Worker 'error'"),
        "failed": E("fn(job, error, prev)", "Worker 'failed'", PREV),
        "paused": E("fn()", "Worker 'paused'"),
        "progress": E("fn(job, progress)", "Worker 'progress'"),
        "ready": E(
            "fn()",
            "Worker.wait_until_ready()",
            "once the worker's connection is open (a Worker made inside a running event "
            "loop; made outside one, it opens at `run()`: no event)",
        ),
        "resumed": E("fn()", "Worker 'resumed'"),
        "stalled": E("fn(jobId, prev)", "Worker 'stalled'", PREV),
        "lockRenewalFailed": E(
            "fn(jobIds)", "Worker 'error' (LockError)", "one id an event, after its `error`"
        ),
        "locksRenewed": E(
            "fn({'count', 'jobIds'})", note="after each renewal that renewed at least one lock"
        ),
    },
    "QueueEventsListener": {
        "active": _feed("{jobId, prev}", "active"),
        "added": _feed("{jobId, name}", "added"),
        "cleaned": _feed("{count}", "cleaned"),
        "completed": _feed("{jobId, returnvalue, prev}", "completed", "`returnvalue` decoded"),
        "deduplicated": _feed("{jobId, deduplicationId, deduplicatedJobId}", "deduplicated"),
        "delayed": _feed("{jobId, delay}", "delayed"),
        "drained": E("fn(id)", "QueueEvents 'drained'", f"{FEED}; the id alone, as Node"),
        "duplicated": _feed("{jobId}", "duplicated"),
        "error": E("fn(error)", "QueueEvents 'error'", f"a read that failed; {LISTENER_RAISED}"),
        "failed": _feed("{jobId, failedReason, prev}", "failed"),
        "paused": _feed("{}", "paused"),
        "progress": _feed("{jobId, data}", "progress"),
        "removed": _feed("{jobId, prev}", "removed"),
        "resumed": _feed("{}", "resumed"),
        "retries-exhausted": _feed("{jobId, attemptsMade}", "retries-exhausted"),
        "stalled": _feed("{jobId}", "stalled"),
        "waiting": _feed("{jobId, prev}", "waiting"),
        "waiting-children": _feed("{jobId}", "waiting-children"),
    },
    "FlowProducerListener": {
        "error": E(
            "fn(error)",
            note=f"{LISTENER_RAISED}; a failed add raises its exception (Node also emits its "
            "connection's errors here)",
        ),
    },
}
