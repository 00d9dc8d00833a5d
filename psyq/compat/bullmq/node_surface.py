"""Node BullMQ 6's public surface and its psyq equivalents: the one table that
tests/compat/test_node_surface.py checks against the npm package's type declarations and
that docs/porting.md's generated section is rendered from.

`MEMBERS[cls][name]` is a public member of Node's class `cls` (`QueueBase` and
`QueueGetters` hold what Queue, Worker, QueueEvents and JobScheduler inherit; a subclass's
own entry overrides its base's). `OPTIONS[type][key]` is a key of Node's options type
(`QueueBaseOptions` holds the keys every constructor's options share). Each names the
`psyq.compat.bullmq` call (`compat`, starting with the member's name there), the psyq core
call it maps onto (`core`) and, in `note`, how it differs; an entry without `compat` is not
in the layer and its `note` says why.

`EVENTS[listener][event]` is an event of Node's listener interface `listener` (the type of
`on(event, listener)`; `IoredisListener` holds the one every class inherits): `compat` is the
call the layer's listener gets (`fn(...)`, Node's arguments), `core` psyq's own event.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EVENTS",
    "EVENT_INHERITS",
    "INHERITS",
    "MEMBERS",
    "OPTIONS",
    "OPTION_BASES",
    "Equivalent",
    "entry_for",
    "event_for",
]


@dataclass(frozen=True)
class Equivalent:
    compat: str
    core: str = ""
    note: str = ""

    @property
    def covered(self) -> bool:
        return bool(self.compat)


def E(compat: str, core: str = "", note: str = "") -> Equivalent:
    return Equivalent(compat, core, note)


def R(reason: str, core: str = "") -> Equivalent:
    """Not in the layer, for `reason` (with the core call that does the job, if any)."""
    return Equivalent("", core, reason)


TELEMETRY = "OpenTelemetry spans: psyq traces through its plugin hooks (docs/plugins.md)"
EMITTER = "EventEmitter"
REDIS_HANDLE = "BullMQ's Redis key map; psyq keeps the same keys on Redis"

# Node's base classes, in the order a subclass's member is looked up.
INHERITS: dict[str, tuple[str, ...]] = {
    "Queue": ("Queue", "QueueGetters", "QueueBase"),
    "Worker": ("Worker", "QueueBase"),
    "QueueEvents": ("QueueEvents", "QueueBase"),
    "JobScheduler": ("JobScheduler", "QueueBase"),
    "Job": ("Job",),
    "FlowProducer": ("FlowProducer",),
}

MEMBERS: dict[str, dict[str, Equivalent]] = {
    "QueueBase": {
        "name": E("name", "Queue.name"),
        "qualifiedName": E("qualifiedName", "Job.queue_qualified_name"),
        "opts": E("opts"),
        "keys": E("keys", note=REDIS_HANDLE),
        "toKey": E("toKey(type)", note=REDIS_HANDLE),
        "backend": E("backend", note="the layer's store handle, not Node's backend object"),
        "getBackend": E("getBackend()", note="returns `backend`"),
        "closing": E("closing", note="true once close() began (Node: the closing promise)"),
        "waitUntilReady": E("waitUntilReady()", "Queue.wait_until_ready()"),
        "close": E("close()", "Queue.close()"),
        "disconnect": E("disconnect()", "Queue.close()"),
        "emit": E("emit(event, *args)", f"{EMITTER}.emit"),
        "trace": R(TELEMETRY),
    },
    "QueueGetters": {
        "getJob": E("getJob(jobId)", "Queue.get_job(job_id)"),
        "count": E("count()", "Queue.count()"),
        "getRateLimitTtl": E("getRateLimitTtl(maxJobs)", "BackendAdapter.get_rate_limit_ttl"),
        "getDebounceJobId": E("getDebounceJobId(id)", "Queue.get_deduplication_job_id(id)"),
        "getDeduplicationJobId": E(
            "getDeduplicationJobId(id)", "Queue.get_deduplication_job_id(id)"
        ),
        "getGlobalConcurrency": E("getGlobalConcurrency()", "BackendAdapter.get_queue_meta"),
        "getGlobalRateLimit": E("getGlobalRateLimit()", "BackendAdapter.get_queue_meta"),
        "getJobCountByTypes": E(
            "getJobCountByTypes(*types)", "Queue.get_job_count_by_types(*types)"
        ),
        "getJobCounts": E("getJobCounts(*types)", "Queue.get_job_counts(*types)"),
        "recordJobCountsMetric": E(
            "recordJobCountsMetric(*types)",
            "Queue.get_job_counts(*types)",
            "returns the counts; Node also records them on its telemetry meter, psyq "
            "exports them through psyq.plugins.prometheus",
        ),
        "getJobState": E("getJobState(jobId)", "Queue.get_job_state(job_id)"),
        "getMeta": E(
            "getMeta()",
            "BackendAdapter.get_queue_meta",
            "psyq's fields: paused, concurrency, max, duration, maxLenEvents",
        ),
        "getCompletedCount": E("getCompletedCount()", "Queue.get_job_counts('completed')"),
        "getFailedCount": E("getFailedCount()", "Queue.get_job_counts('failed')"),
        "getDelayedCount": E(
            "getDelayedCount(timestamp)",
            "Queue.get_job_counts('delayed')",
            "with `timestamp`, the jobs due strictly before it, as Node",
        ),
        "getActiveCount": E("getActiveCount()", "Queue.get_job_counts('active')"),
        "getPrioritizedCount": E("getPrioritizedCount()", "Queue.get_job_counts('prioritized')"),
        "getCountsPerPriority": E(
            "getCountsPerPriority(priorities)", "Queue.get_counts_per_priority(priorities)"
        ),
        "getWaitingCount": E("getWaitingCount()", "Queue.get_job_counts('waiting')"),
        "getWaitingChildrenCount": E(
            "getWaitingChildrenCount()", "Queue.get_job_counts('waiting-children')"
        ),
        "getWaiting": E("getWaiting(start, end)", "Queue.get_waiting(start, end)"),
        "getWaitingChildren": E(
            "getWaitingChildren(start, end)", "Queue.get_jobs(['waiting-children'], ...)"
        ),
        "getActive": E("getActive(start, end)", "Queue.get_active(start, end)"),
        "getDelayed": E("getDelayed(start, end)", "Queue.get_delayed(start, end)"),
        "getPrioritized": E("getPrioritized(start, end)", "Queue.get_prioritized(start, end)"),
        "getCompleted": E("getCompleted(start, end)", "Queue.get_completed(start, end)"),
        "getFailed": E("getFailed(start, end)", "Queue.get_failed(start, end)"),
        "getDependencies": E(
            "getDependencies(parentId, type, start, end)",
            "Job.get_dependencies()",
            "`type` 'processed' or 'pending'; `items` and `total` as Node's, `jobs` Job objects",
        ),
        "getRanges": E("getRanges(types, start, end, asc)", "Queue.get_jobs(types, ...)"),
        "getJobs": E("getJobs(types, start, end, asc)", "Queue.get_jobs(types, start, end, asc)"),
        "getJobLogs": E("getJobLogs(jobId, start, end, asc)", "Queue.get_job_logs(job_id, ...)"),
        "getWorkers": E("getWorkers()", "Queue.get_workers()"),
        "getWorkersCount": E("getWorkersCount()", "Queue.get_workers()"),
        "getQueueEvents": R(
            "Node lists the Redis clients named `<queue>:qe`; psyq's QueueEvents register "
            "nowhere on most stores (on Postgres, Node lists them: docs/interop.md)"
        ),
        "getMetrics": E("getMetrics(type, start, end)", "Queue.get_metrics(kind, start, end)"),
        "exportPrometheusMetrics": E(
            "exportPrometheusMetrics(globalVariables)",
            "Queue.get_job_counts(), Queue.get_metrics(kind)",
            "Node's text, line for line",
        ),
    },
    "Queue": {
        "opts": E("opts"),
        "jobsOpts": E("jobsOpts"),
        "token": E("token", note="a random id of this Queue object"),
        "defaultJobOptions": E("defaultJobOptions", "Queue(default_job_options=...)"),
        "metaValues": R("the meta fields Node writes when a Queue opens; psyq's Queue writes none"),
        "getVersion": R(
            "BullMQ's library version in the queue's meta: psyq's stores keep none (on "
            "Redis its workers note `psyq:<version>` there)"
        ),
        "jobScheduler": E("jobScheduler", note="a property (Node: a promise of it)"),
        "setGlobalConcurrency": E(
            "setGlobalConcurrency(concurrency)", "Queue.set_global_concurrency(n)"
        ),
        "setGlobalRateLimit": E(
            "setGlobalRateLimit(max, duration)", "Queue.set_global_rate_limit(max, duration)"
        ),
        "removeGlobalConcurrency": E(
            "removeGlobalConcurrency()", "BackendAdapter.set_global_concurrency(q, None)"
        ),
        "removeGlobalRateLimit": E(
            "removeGlobalRateLimit()", "BackendAdapter.set_global_rate_limit(q, None)"
        ),
        "add": E("add(name, data, opts)", "Queue.add(name, data, **opts)"),
        "addBulk": E("addBulk(jobs)", "Queue.add_bulk(jobs)"),
        "upsertJobScheduler": E(
            "upsertJobScheduler(id, repeatOpts, jobTemplate)",
            "Queue.upsert_job_scheduler(id, repeat, template)",
            "Node's template `{name, data, opts}`, or the Python package's keyword arguments "
            "`job_name=`, `job_data=`, `opts=`",
        ),
        "pause": E("pause()", "Queue.pause()"),
        "close": E("close()", "Queue.close()"),
        "rateLimit": E("rateLimit(expireTimeMs)", "BackendAdapter.rate_limit"),
        "resume": E("resume()", "Queue.resume()"),
        "isPaused": E("isPaused()", "Queue.is_paused()"),
        "isMaxed": E("isMaxed()", "Queue.get_job_counts('active')", "active ≥ global concurrency"),
        "getJobScheduler": E("getJobScheduler(id)", "Queue.get_job_scheduler(id)"),
        "getJobSchedulers": E(
            "getJobSchedulers(start, end, asc)", "Queue.get_job_schedulers(start, end, asc)"
        ),
        "getJobSchedulersCount": E("getJobSchedulersCount()", "Queue.get_job_schedulers_count()"),
        "removeJobScheduler": E(
            "removeJobScheduler(id)",
            "Queue.remove_job_scheduler(id)",
            "returns the Python package's 0 (removed) / 1 (none); Node's boolean is "
            "`await queue.removeJobScheduler(id) == 0`",
        ),
        "removeDebounceKey": E("removeDebounceKey(id)", "Queue.remove_deduplication_key(id)"),
        "removeDeduplicationKey": E(
            "removeDeduplicationKey(id)", "Queue.remove_deduplication_key(id)"
        ),
        "removeRateLimitKey": E("removeRateLimitKey()", "BackendAdapter.rate_limit(q, 0)"),
        "remove": E("remove(jobId, opts)", "Queue.remove(job_id, remove_children)"),
        "updateJobProgress": E(
            "updateJobProgress(jobId, progress)", "Job.update_progress(progress)"
        ),
        "addJobLog": E("addJobLog(jobId, logRow, keepLogs)", "Job.log(row)"),
        "drain": E("drain(delayed)", "Queue.drain(delayed)"),
        "clean": E("clean(grace, limit, type)", "Queue.clean(grace, limit, type)"),
        "obliterate": E("obliterate(opts)", "Queue.obliterate(force)", "`{force}` or `force=`"),
        "retryJobs": E("retryJobs(opts)", "Queue.retry_jobs(state, count, timestamp)"),
        "promoteJobs": E("promoteJobs(opts)", "Queue.promote_jobs(count)"),
        "trimEvents": E("trimEvents(maxLength)", "Queue.set_max_len_events(n)"),
        "removeDeprecatedPriorityKey": E(
            "removeDeprecatedPriorityKey()", note="deletes BullMQ 4's priority key on Redis"
        ),
        "removeOrphanedJobs": R(
            "repairs Redis job hashes that no state list holds, left by crashed older "
            "BullMQ versions; psyq's transitions never leave one"
        ),
        "on": E("on(event, listener)", f"{EMITTER}.on"),
        "once": E("once(event, listener)", f"{EMITTER}.once"),
        "off": E("off(event, listener)", f"{EMITTER}.off"),
    },
    "Worker": {
        "opts": E("opts"),
        "id": E("id"),
        "RateLimitError": E("RateLimitError()", "psyq.RateLimitError"),
        "extendJobLocks": E(
            "extendJobLocks(jobIds, tokens, duration)", "BackendAdapter.extend_locks"
        ),
        "waitUntilReady": E("waitUntilReady()", "Worker.wait_until_ready()"),
        "cancelJob": E("cancelJob(jobId, reason)", "AbortController.abort(reason)"),
        "cancelAllJobs": E("cancelAllJobs(reason)", "AbortController.abort(reason)"),
        "concurrency": E(
            "concurrency",
            "Worker.concurrency",
            "`worker.concurrency = n` takes effect while the worker runs",
        ),
        "jobScheduler": E("jobScheduler", note="a property (Node: a promise of it)"),
        "run": E("run()", "Worker.run()"),
        "getNextJob": E("getNextJob(token, opts)", "Worker.get_next_job(token, block)"),
        "rateLimit": E("rateLimit(expireTimeMs)", "Worker.rate_limit(ms)"),
        "minimumBlockTimeout": E("minimumBlockTimeout", note="seconds"),
        "maximumBlockTimeout": E("maximumBlockTimeout", note="seconds"),
        "delay": E("delay(milliseconds, abortController)", "asyncio.sleep"),
        "processJob": R(
            "the worker's own per-job step (Node calls it from its main loop); psyq's worker "
            "runs it inside Worker.run(), and manual processing uses getNextJob and "
            "moveToCompleted / moveToFailed"
        ),
        "pause": E("pause(doNotWaitActive)", "Worker.pause(do_not_wait_active)"),
        "resume": E("resume()", "Worker.resume()"),
        "isPaused": E("isPaused()", "Worker.paused"),
        "isRunning": E("isRunning()", "Worker.is_running()"),
        "close": E("close(force)", "Worker.close(force)"),
        "startStalledCheckTimer": E(
            "startStalledCheckTimer()",
            "Worker.check_stalled()",
            "every stalledInterval until close (a worker with a processor checks by itself)",
        ),
        "emit": E("emit(event, *args)", f"{EMITTER}.emit"),
        "on": E("on(event, listener)", f"{EMITTER}.on"),
        "once": E("once(event, listener)", f"{EMITTER}.once"),
        "off": E("off(event, listener)", f"{EMITTER}.off"),
    },
    "QueueEvents": {
        "run": E("run()", "QueueEvents.run()"),
        "close": E("close()", "QueueEvents.close()"),
        "emit": E("emit(event, *args)", f"{EMITTER}.emit"),
        "on": E("on(event, listener)", "QueueEvents.on(event, listener)"),
        "once": E("once(event, listener)", "QueueEvents.once(event, listener)"),
        "off": E("off(event, listener)", "QueueEvents.off(event, listener)"),
    },
    "JobScheduler": {
        "upsertJobScheduler": E(
            "upsertJobScheduler(id, repeatOpts, jobName, jobData, opts, {override, producerId})",
            "Queue.upsert_job_scheduler(id, repeat, template)",
            "the last as Node's dict or as `override=`, `producer_id=`",
        ),
        "removeJobScheduler": E(
            "removeJobScheduler(id)",
            "Queue.remove_job_scheduler(id)",
            "0 when removed, 1 when there was none (as Node's JobScheduler)",
        ),
        "isJobScheduler": E("isJobScheduler(id)", "Queue.get_job_scheduler(id)"),
        "getScheduler": E("getScheduler(id)", "Queue.get_job_scheduler(id)"),
        "getJobSchedulers": E(
            "getJobSchedulers(start, end, asc)", "Queue.get_job_schedulers(start, end, asc)"
        ),
        "getSchedulersCount": E("getSchedulersCount()", "Queue.get_job_schedulers_count()"),
        "closing": E("closing", note="its queue's"),
        "close": E("close()", note="closes nothing: the queue it was made from owns the store"),
        "disconnect": E("disconnect()", note="as close()"),
        "emit": E("emit(event, *args)", note="emits on its queue"),
    },
    "Job": {
        "name": E("name", "Job.name"),
        "data": E("data", "Job.data"),
        "opts": E("opts", "Job.opts"),
        "id": E("id", "Job.id"),
        "queueQualifiedName": E("queueQualifiedName", "Job.queue_qualified_name"),
        "progress": E("progress", "Job.progress"),
        "returnvalue": E("returnvalue", "Job.returnvalue"),
        "stacktrace": E("stacktrace", "Job.stacktrace"),
        "delay": E("delay", "Job.delay"),
        "priority": E("priority", "Job.priority"),
        "timestamp": E("timestamp", "Job.timestamp"),
        "attemptsStarted": E("attemptsStarted", "Job.attempts_started"),
        "attemptsMade": E("attemptsMade", "Job.attempts_made"),
        "stalledCounter": E("stalledCounter", "Job.stalled_counter"),
        "failedReason": E("failedReason", "Job.failed_reason"),
        "deferredFailure": E("deferredFailure"),
        "finishedOn": E("finishedOn", "Job.finished_on"),
        "processedOn": E("processedOn", "Job.processed_on"),
        "parentKey": E("parentKey", "Job.parent_key"),
        "parent": E("parent"),
        "deduplicationId": E("deduplicationId", "Job.opts['deduplication']['id']"),
        "repeatJobKey": E("repeatJobKey"),
        "token": E("token", "Job.token"),
        "processedBy": E("processedBy", "Job.processed_by"),
        "queueName": E("queueName", "Job.queue_name"),
        "prefix": E("prefix"),
        "create": E("create(queue, name, data, opts)", "Queue.add(name, data, **opts)"),
        "createBulk": E("createBulk(queue, jobs)", "Queue.add_bulk(jobs)"),
        "fromJSON": E("fromJSON(queue, json, jobId)"),
        "optsFromJSON": E("optsFromJSON(rawOpts, optsDecode)"),
        "fromId": E("fromId(queue, jobId)", "Queue.get_job(job_id)"),
        "addJobLog": E("addJobLog(queue, jobId, logRow, keepLogs)", "Job.log(row)"),
        "toJSON": E("toJSON()", "Job.to_dict()"),
        "asJSON": E("asJSON()", note="BullMQ's stored fields, JSON-encoded as Node's"),
        "asJSONSandbox": R(
            "the form Node hands a sandboxed child process; psyq.sandbox passes the Job itself"
        ),
        "updateData": E("updateData(data)", "Job.update_data(data)"),
        "updateProgress": E("updateProgress(progress)", "Job.update_progress(progress)"),
        "log": E("log(logRow)", "Job.log(row)"),
        "removeChildDependency": R(
            "detaches a child from its parent; psyq's stores have no such transition yet "
            "(use the child's removeDependencyOnFailure option, or remove the child)"
        ),
        "clearLogs": E("clearLogs(keepLogs)", "Job.clear_logs(keep)"),
        "remove": E("remove(opts)", "Job.remove(remove_children)"),
        "removeUnprocessedChildren": E(
            "removeUnprocessedChildren()",
            "Queue.remove(child_id) for each unprocessed child",
            "skips children being processed, as Node",
        ),
        "extendLock": E("extendLock(token, duration)", "Job.extend_lock(token, duration)"),
        "moveToCompleted": E(
            "moveToCompleted(returnValue, token, fetchNext)",
            "Job.move_to_completed(...)",
            "`fetchNext` defaults to False, as in the Python package (Node: true)",
        ),
        "moveToWait": E(
            "moveToWait(token)",
            "BackendAdapter.move_job_from_active_to_wait",
            "returns the queue's rate-limit ttl (0 when none), as Node",
        ),
        "moveToFailed": E("moveToFailed(err, token, fetchNext)", "Job.move_to_failed(error)"),
        "isCompleted": E("isCompleted()", "Job.is_completed()"),
        "isFailed": E("isFailed()", "Job.is_failed()"),
        "isDelayed": E("isDelayed()", "Job.is_delayed()"),
        "isWaitingChildren": E("isWaitingChildren()", "Job.get_state()"),
        "isActive": E("isActive()", "Job.is_active()"),
        "isWaiting": E("isWaiting()", "Job.is_waiting()"),
        "getState": E("getState()", "Job.get_state()"),
        "changeDelay": E("changeDelay(delay)", "Job.change_delay(delay)"),
        "changePriority": E("changePriority(opts)", "Job.change_priority(priority, lifo)"),
        "getChildrenValues": E("getChildrenValues()", "Job.get_children_values()"),
        "getIgnoredChildrenFailures": E(
            "getIgnoredChildrenFailures()", "Job.get_dependencies()['ignored']"
        ),
        "getFailedChildrenValues": E(
            "getFailedChildrenValues()", "Job.get_failed_children_values()"
        ),
        "getDependencies": E(
            "getDependencies(opts)",
            "Job.get_dependencies()",
            "with `opts`, Node's pages: each kind asked and its `next<Kind>Cursor`",
        ),
        "getDependenciesCount": E("getDependenciesCount(opts)", "Job.get_dependencies()"),
        "waitUntilFinished": E(
            "waitUntilFinished(queueEvents, ttl)", "Job.wait_until_finished(events, timeout)"
        ),
        "moveToDelayed": E("moveToDelayed(timestamp, token)", "Job.move_to_delayed(ts, token)"),
        "moveToWaitingChildren": E(
            "moveToWaitingChildren(token, opts)", "Job.move_to_waiting_children(token)"
        ),
        "promote": E("promote()", "Job.promote()"),
        "retry": E("retry(state, opts)", "Job.retry(state, ...)"),
        "addJob": R("writes the job in a Redis transaction Node holds; use Job.create"),
        "toFlowEntry": R("FlowProducer's own step; use FlowProducer.add"),
        "removeDeduplicationKey": E(
            "removeDeduplicationKey()", "BackendAdapter.remove_deduplication_key(q, id, job)"
        ),
    },
    "FlowProducer": {
        "opts": E("opts"),
        "keys": E("keys", note=REDIS_HANDLE),
        "toKey": E("toKey(name, type)", note=REDIS_HANDLE),
        "closing": E("closing", note="true once close() began"),
        "waitUntilReady": E("waitUntilReady()"),
        "getBackend": E("getBackend()", note="returns `backend`"),
        "add": E("add(flow, opts)", "FlowProducer.add(flow)"),
        "getFlow": E(
            "getFlow(opts)",
            "FlowProducer.get_flow(job_id, queue_name, depth, max_children)",
            "depth 10 and maxChildren 20 by default, as Node; None for a missing job",
        ),
        "addBulk": E("addBulk(flows)", "FlowProducer.add_bulk(flows)"),
        "close": E("close()", "FlowProducer.close()"),
        "disconnect": E("disconnect()", "FlowProducer.close()"),
        "emit": E("emit(event, *args)", f"{EMITTER}.emit"),
        "on": E("on(event, listener)", f"{EMITTER}.on"),
        "once": E("once(event, listener)", f"{EMITTER}.once"),
        "off": E("off(event, listener)", f"{EMITTER}.off"),
    },
}

_CONNECTION = E(
    "connection",
    "Queue(url)",
    "any psyq URL, ioredis-style options, a redis-py client (docs/porting.md)",
)
_PREFIX = E("prefix", "Queue(prefix=)")
_TELEMETRY = R(TELEMETRY)
_KEEP = E("removeOnComplete", "remove_on_complete=")

# Options types whose keys also come from QueueBaseOptions / KeyPrefixOptions.
OPTION_BASES: dict[str, tuple[str, ...]] = {
    name: (name, "QueueBaseOptions")
    for name in (
        "QueueOptions",
        "WorkerOptions",
        "QueueEventsOptions",
        "FlowProducerOptions",
        "RepeatBaseOptions",
    )
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
        "count": E("count", note="read against `limit`; psyq's store counts the runs"),
        "key": R("Node derives a scheduler's key; the scheduler id is the key here"),
        "offset": R("BullMQ's bookkeeping of `every` schedulers; psyq's compute runs in the store"),
        "prevMillis": R("BullMQ's scheduler bookkeeping; psyq's schedulers keep their own"),
        "jobId": R("Node 6's schedulers take none either: the scheduler id names the runs"),
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


def event_for(cls: str, event: str) -> Equivalent | None:
    """The entry of event `event` of Node's class `cls` (its listener's or inherited)."""
    for listener in EVENT_INHERITS.get(cls, ()):
        found = EVENTS.get(listener, {}).get(event)
        if found is not None:
            return found
    return None


def entry_for(cls: str, member: str) -> Equivalent | None:
    """The entry of Node's `cls.member`, its own or its base class's."""
    for owner in INHERITS.get(cls, (cls,)):
        found = MEMBERS.get(owner, {}).get(member)
        if found is not None:
            return found
    return None


def option_for(kind: str, key: str) -> Equivalent | None:
    """The entry of key `key` of Node's options type `kind`, its own or its base's."""
    for owner in OPTION_BASES.get(kind, (kind,)):
        found = OPTIONS.get(owner, {}).get(key)
        if found is not None:
            return found
    return None
