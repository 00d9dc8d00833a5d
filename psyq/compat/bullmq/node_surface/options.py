"""`OPTIONS[type][key]`: the keys of Node BullMQ 6's options types and their
equivalents, and `OPTION_BASES`, the types whose keys also come from a base (the table:
psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

from psyq.compat.bullmq.node_surface.equivalent import TELEMETRY, E, Equivalent, R

__all__ = ["OPTIONS", "OPTION_BASES"]

_CONNECTION = E(
    "connection",
    "Queue(url)",
    "any psyq URL, ioredis-style options, a redis-py client (docs/porting.md)",
)
_PREFIX = E("prefix", "Queue(prefix=)")
_TELEMETRY = R(TELEMETRY)
_KEEP = E("removeOnComplete", "remove_on_complete=")

# Options types whose keys also come from a base: QueueBaseOptions (KeyPrefixOptions), or
# RepeatOptions for the repeat options of a scheduler's runs.
OPTION_BASES: dict[str, tuple[str, ...]] = {
    **{
        name: (name, "QueueBaseOptions")
        for name in (
            "QueueOptions",
            "WorkerOptions",
            "QueueEventsOptions",
            "FlowProducerOptions",
            "RepeatBaseOptions",
        )
    },
    "JobSchedulerRepeatOptions": ("JobSchedulerRepeatOptions", "RepeatOptions"),
}

OPTIONS: dict[str, dict[str, Equivalent]] = {
    "QueueBaseOptions": {
        "connection": _CONNECTION,
        "prefix": _PREFIX,
        "blockingConnection": E(
            "blockingConnection", note="taken; psyq's stores choose their own connections"
        ),
        "skipVersionCheck": E("skipVersionCheck", note="taken; psyq checks no server version"),
        "skipWaitingForReady": E(
            "skipWaitingForReady", note="taken; psyq opens the store on first use"
        ),
        "telemetry": _TELEMETRY,
    },
    "QueueOptions": {
        "defaultJobOptions": E("defaultJobOptions", "Queue(default_job_options=)"),
        "streams": R(
            "`{events: {maxLen}}` is not read when the Queue is made: call "
            "`queue.trimEvents(maxLen)`",
            "Queue.set_max_len_events(n)",
        ),
        "skipMetasUpdate": E("skipMetasUpdate", note="taken; psyq writes no meta on open"),
        "settings": R(
            "`repeatStrategy` / `repeatKeyHashAlgorithm`: psyq's schedulers compute runs "
            "from `every` / `pattern` in the store (JobScheduler(queue, repeat_strategy) "
            "takes a strategy for its own calls)"
        ),
    },
    "WorkerOptions": {
        "name": E("name", "Worker(worker_name=)"),
        "autorun": E("autorun", "Worker(autorun=)"),
        "concurrency": E("concurrency", "Worker(concurrency=)"),
        "limiter": E("limiter", "Worker(limiter=)"),
        "metrics": R(
            "`maxDataPoints`: psyq's stores keep BullMQ's metrics with their own bound",
            "Queue.get_metrics",
        ),
        "maximumRateLimitDelay": R(
            "not taken: psyq's worker decides itself how long it waits out a rate limit"
        ),
        "maxStartedAttempts": E(
            "maxStartedAttempts",
            note="a job started more often fails unrecoverably, unrun, as Node",
        ),
        "maxStalledCount": E("maxStalledCount", "Worker(max_stalled_count=)"),
        "stalledInterval": E("stalledInterval", "Worker(stalled_interval=)"),
        "removeOnComplete": E("removeOnComplete", "Worker(remove_on_complete=)"),
        "removeOnFail": E("removeOnFail", "Worker(remove_on_fail=)"),
        "skipStalledCheck": E("skipStalledCheck", "Worker(skip_stalled_check=)"),
        "skipLockRenewal": E("skipLockRenewal", "Worker(skip_lock_renewal=)"),
        "drainDelay": E("drainDelay", "Worker(drain_delay=)", "seconds, as Node"),
        "lockDuration": E("lockDuration", "Worker(lock_duration=)"),
        "lockRenewTime": E("lockRenewTime", "Worker(lock_renew_time=)"),
        "runRetryDelay": E("runRetryDelay", note="taken; psyq's worker retries its store itself"),
        "settings": E("settings", note="`backoffStrategy`: one function for every custom type"),
        "useWorkerThreads": R(
            "Node's worker threads; run CPU-bound processors in psyq.sandbox.Sandbox "
            "(a Worker given it warns)"
        ),
        "workerForkOptions": R("Node's child_process.fork options; see psyq.sandbox.Sandbox"),
        "workerThreadsOptions": R("Node's worker_threads options; see psyq.sandbox.Sandbox"),
        "telemetry": _TELEMETRY,
    },
    "QueueEventsOptions": {
        "autorun": E("autorun", "QueueEvents(autorun=)"),
        "lastEventId": E("lastEventId", "QueueEvents(last_event_id=)"),
        "blockingTimeout": E("blockingTimeout", "QueueEvents(blocking_timeout=)"),
    },
    "FlowProducerOptions": {},
    "RepeatBaseOptions": {
        "settings": R(
            "JobScheduler is made from a Queue here: JobScheduler(queue, repeat_strategy)"
        ),
    },
    "JobsOptions": {
        "timestamp": E("timestamp", "timestamp="),
        "priority": E("priority", "priority="),
        "delay": E("delay", "delay="),
        "attempts": E("attempts", "attempts="),
        "backoff": E("backoff", "backoff="),
        "lifo": E("lifo", "lifo="),
        "removeOnComplete": _KEEP,
        "removeOnFail": E("removeOnFail", "remove_on_fail="),
        "keepLogs": E("keepLogs", "keep_logs="),
        "stackTraceLimit": E("stackTraceLimit", "stack_trace_limit="),
        "sizeLimit": E("sizeLimit", "size_limit="),
        "jobId": E("jobId", "job_id="),
        "parent": E("parent", "parent="),
        "failParentOnFailure": E("failParentOnFailure", "fail_parent_on_failure="),
        "continueParentOnFailure": E("continueParentOnFailure", "continue_parent_on_failure="),
        "ignoreDependencyOnFailure": E(
            "ignoreDependencyOnFailure", "ignore_dependency_on_failure="
        ),
        "removeDependencyOnFailure": E(
            "removeDependencyOnFailure", "remove_dependency_on_failure="
        ),
        "deduplication": E("deduplication", "deduplication="),
        "telemetry": E("telemetry", "telemetry=", "stored for Node's workers to read"),
        "repeatJobKey": R("set by BullMQ's schedulers on their runs; psyq's set it themselves"),
        "prevMillis": R("BullMQ's scheduler bookkeeping; psyq's schedulers keep their own"),
    },
    "RepeatOptions": {
        "every": E("every", "repeat={'every': ms}"),
        "pattern": E("pattern", "repeat={'pattern': cron}"),
        "tz": E("tz", "repeat={'tz': zone}"),
        "limit": E("limit", "repeat={'limit': n}"),
        "immediately": E("immediately", "repeat={'immediately': True}"),
        "startDate": E("startDate", "repeat={'startDate': ms}"),
        "endDate": E("endDate", "repeat={'endDate': ms}"),
        "key": R("Node derives a scheduler's key; the scheduler id is the key here"),
        "offset": R("BullMQ's bookkeeping of `every` schedulers; psyq's compute runs in the store"),
        "prevMillis": R("BullMQ's scheduler bookkeeping; psyq's schedulers keep their own"),
        "jobId": R("Node 6's schedulers take none either: the scheduler id names the runs"),
    },
    # the repeat options a scheduler's runs carry (Node 6.7.6 moved `count` here)
    "JobSchedulerRepeatOptions": {
        "count": E("count", note="read against `limit`; psyq's store counts the runs"),
    },
    "DeduplicationOptions": {
        "id": E("id", "deduplication={'id': ...}"),
        "ttl": E("ttl", "deduplication={'ttl': ms}"),
        "extend": E("extend", "deduplication={'extend': True}"),
        "replace": E("replace", "deduplication={'replace': True}"),
        "reschedule": R(
            "not in psyq's stores yet (refused with a ValueError naming it): use "
            "`extend` + `replace` with a `delay`"
        ),
        "keepLastIfActive": R(
            "not in psyq's stores yet (refused with a ValueError naming it): keeping the "
            "newest add while the deduplicated job runs needs a transition on every store"
        ),
    },
    "BackoffOptions": {
        "type": E("type", "backoff={'type': ...}"),
        "delay": E("delay", "backoff={'delay': ms}"),
        "jitter": E("jitter", "backoff={'jitter': 0..1}"),
    },
    "KeepJobs": {
        "count": E("count", "remove_on_complete={'count': n}"),
        "age": E("age", "remove_on_complete={'age': s}"),
        "limit": E("limit", "remove_on_complete={'limit': n}"),
    },
    "ParentOptions": {
        "id": E("id", "parent={'id': ...}"),
        "queue": E("queue", "parent={'queue': ...}"),
    },
    "AdvancedOptions": {
        "backoffStrategy": E("backoffStrategy", "psyq.register_backoff_strategy"),
        "repeatStrategy": R(
            "a Worker's settings do not take it: JobScheduler(queue, repeat_strategy) does"
        ),
        "repeatKeyHashAlgorithm": R("Node hashes legacy repeatable keys; psyq has none"),
    },
    "RateLimiterOptions": {
        "max": E("max", "Worker(limiter=Limiter(max, duration))"),
        "duration": E("duration", "Worker(limiter=Limiter(max, duration))"),
    },
    "MetricsOptions": {
        "maxDataPoints": R("psyq's stores keep BullMQ's metrics with their own bound"),
    },
    "RetryOptions": {
        "resetAttemptsMade": E("resetAttemptsMade", "Job.retry(reset_attempts_made=)"),
        "resetAttemptsStarted": E("resetAttemptsStarted", "Job.retry(reset_attempts_started=)"),
    },
    "DependenciesOpts": {
        kind: E(kind, "Job.get_dependencies()", "the kinds getDependencies pages")
        for kind in ("failed", "ignored", "processed", "unprocessed")
    },
    "DependencyOpts": {
        "cursor": E("cursor", note="where the page starts (an offset; 0 first)"),
        "count": E("count", note="the page's size (default 20, as Node)"),
    },
    "MoveToWaitingChildrenOpts": {
        "child": R("Node checks one child's key; psyq's transition looks at all pending children"),
    },
    "GetNextJobOptions": {
        "block": E("block", "Worker.get_next_job(token, block)"),
    },
    "ObliterateOpts": {
        "force": E("force", "Queue.obliterate(force)"),
        "count": E("count", note="taken; Node's batch size: psyq obliterates in one call"),
    },
    "FlowJobBase": {
        "name": E("name", "FlowProducer.add({'name': ...})"),
        "queueName": E("queueName", "FlowProducer.add({'queue_name': ...})"),
        "data": E("data", "FlowProducer.add({'data': ...})"),
        "prefix": E("prefix"),
        "opts": E("opts", "FlowProducer.add({'opts': ...})"),
    },
    "FlowOpts": {
        "queuesOptions": E("queuesOptions", note="each queue's `defaultJobOptions`"),
    },
    "NodeOpts": {
        "queueName": E("queueName", "FlowProducer.get_flow(queue_name=)"),
        "id": E("id", "FlowProducer.get_flow(job_id=)"),
        "prefix": E("prefix"),
        "depth": E("depth", "FlowProducer.get_flow(depth=)"),
        "maxChildren": E("maxChildren", "FlowProducer.get_flow(max_children=)"),
    },
}
