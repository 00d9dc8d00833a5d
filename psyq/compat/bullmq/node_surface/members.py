"""`MEMBERS[cls][name]`: the public members of Node BullMQ 6's classes and their
equivalents, and `INHERITS`, the order a class's member is looked up in its bases (the
table: psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

from psyq.compat.bullmq.node_surface.equivalent import (
    EMITTER,
    REDIS_HANDLE,
    TELEMETRY,
    E,
    Equivalent,
    R,
)

__all__ = ["INHERITS", "MEMBERS"]

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
