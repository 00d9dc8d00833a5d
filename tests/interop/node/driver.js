// One long-lived Node BullMQ process serving the interop matrix: node driver.js <redis url>
// Reads one JSON request a line on stdin, {req, op, ...args}, and answers each with one JSON
// line on stdout, {req, ok: result} or {req, error: message}. Requests run concurrently.
// Workers run the processor below: it follows the steps in job.data.steps (see `runSteps`),
// the same small language tests/interop/sides.py gives psyq's workers.
const readline = require('readline');
const bullmq = require('bullmq');

// stdout carries the answers only: anything a library logs goes to stderr.
console.log = console.error;
console.info = console.error;

const { Queue, Worker, QueueEvents, FlowProducer } = bullmq;
const { DelayedError, WaitingChildrenError, UnrecoverableError, RateLimitError } = bullmq;
const url = process.argv[2];
const connection = { url };
const queues = new Map();
const handles = new Map();
let nextHandle = 0;

function queue(name) {
  if (!queues.has(name)) queues.set(name, new Queue(name, { connection }));
  return queues.get(name);
}

function keep(thing) {
  nextHandle += 1;
  handles.set(nextHandle, thing);
  return nextHandle;
}

// The state is read first: once final, the fields read after it are final too.
async function job(name, id) {
  const state = await queue(name).getJobState(id);
  const found = await queue(name).getJob(id);
  if (!found) return null;
  const logs = await queue(name).getJobLogs(id);
  return {
    id: found.id,
    name: found.name,
    data: found.data,
    opts: found.opts,
    state,
    returnvalue: found.returnvalue === undefined ? null : found.returnvalue,
    failedReason: found.failedReason === undefined ? null : found.failedReason,
    stacktrace: found.stacktrace || [],
    attemptsMade: found.attemptsMade,
    attemptsStarted: found.attemptsStarted,
    progress: found.progress,
    delay: found.delay,
    priority: found.priority,
    timestamp: found.timestamp,
    processedOn: found.processedOn === undefined ? null : found.processedOn,
    finishedOn: found.finishedOn === undefined ? null : found.finishedOn,
    logs: logs.logs,
    parentKey: found.parentKey === undefined ? null : found.parentKey,
    repeatJobKey: found.repeatJobKey === undefined ? null : found.repeatJobKey,
    deduplicationId: found.deduplicationId === undefined ? null : found.deduplicationId,
  };
}

// Steps, run in order; a step marked `once` runs on the job's first pass only (the mark is
// kept in the job's data, so a job that comes back skips it, whichever side runs it then).
async function runSteps(job, token, worker) {
  const data = job.data && typeof job.data === 'object' ? job.data : {};
  for (const [index, step] of (data.steps || []).entries()) {
    const mark = `done${index}`;
    if (step.once && data[mark]) continue;
    if (step.once) await job.updateData({ ...data, [mark]: true });
    if ('progress' in step) await job.updateProgress(step.progress);
    if ('log' in step) await job.log(step.log);
    if ('fail' in step) throw new Error(step.fail);
    if ('failUntil' in step && job.attemptsMade + 1 < step.failUntil) throw new Error(`attempt ${job.attemptsMade + 1}`);
    if ('unrecoverable' in step) throw new UnrecoverableError(step.unrecoverable);
    if ('delay' in step) {
      await job.moveToDelayed(Date.now() + step.delay, token);
      throw new DelayedError();
    }
    if ('child' in step) {
      const parent = { id: job.id, queue: job.queueQualifiedName };
      await queue(step.child.queue).add(step.child.name, step.child.data, { parent });
      if (await job.moveToWaitingChildren(token)) throw new WaitingChildrenError();
    }
    if ('rateLimit' in step) {
      await worker.rateLimit(step.rateLimit);
      throw new RateLimitError();
    }
    if ('sleep' in step) await new Promise((resolve) => setTimeout(resolve, step.sleep));
    if ('childrenValues' in step) return await job.getChildrenValues();
    if ('ignoredFailures' in step) return await job.getFailedChildrenValues();
    if ('return' in step) return step.return;
  }
  return { by: 'node', name: job.name };
}

const ops = {
  add: ({ queue: name, name: jobName, data, opts }) =>
    queue(name).add(jobName, data, opts || {}).then((added) => added.id),
  addBulk: ({ queue: name, jobs }) =>
    queue(name).addBulk(jobs).then((added) => added.map((one) => one.id)),
  flow: async ({ tree }) => {
    const producer = new FlowProducer({ connection });
    try {
      const ids = (node) => ({ id: node.job.id, children: (node.children || []).map(ids) });
      return ids(await producer.add(tree));
    } finally {
      await producer.close();
    }
  },
  job: ({ queue: name, id }) => job(name, id),
  counts: ({ queue: name, types }) => queue(name).getJobCounts(...(types || [])),
  getJobs: ({ queue: name, types, start, end, asc }) =>
    queue(name).getJobs(types, start || 0, end === undefined ? -1 : end, asc || false)
      .then((found) => found.filter(Boolean).map((one) => one.id)),
  pause: ({ queue: name }) => queue(name).pause(),
  resume: ({ queue: name }) => queue(name).resume(),
  isPaused: ({ queue: name }) => queue(name).isPaused(),
  retry: async ({ queue: name, id, state }) => (await queue(name).getJob(id)).retry(state || 'failed'),
  promote: async ({ queue: name, id }) => (await queue(name).getJob(id)).promote(),
  remove: ({ queue: name, id }) => queue(name).remove(id),
  changePriority: async ({ queue: name, id, priority }) =>
    (await queue(name).getJob(id)).changePriority({ priority }),
  changeDelay: async ({ queue: name, id, delay }) => (await queue(name).getJob(id)).changeDelay(delay),
  updateData: async ({ queue: name, id, data }) => (await queue(name).getJob(id)).updateData(data),
  drain: ({ queue: name, delayed }) => queue(name).drain(delayed || false),
  clean: ({ queue: name, grace, limit, type }) => queue(name).clean(grace, limit, type),
  obliterate: ({ queue: name }) => queue(name).obliterate({ force: true }),
  workers: ({ queue: name }) => queue(name).getWorkers().then((found) => found.length),
  retryJobs: ({ queue: name, state }) => queue(name).retryJobs({ state: state || 'failed' }),
  promoteJobs: ({ queue: name }) => queue(name).promoteJobs(),
  setGlobalConcurrency: ({ queue: name, concurrency }) => queue(name).setGlobalConcurrency(concurrency),
  setGlobalRateLimit: ({ queue: name, max, duration }) => queue(name).setGlobalRateLimit(max, duration),
  getDeduplicationJobId: ({ queue: name, dedupId }) => queue(name).getDeduplicationJobId(dedupId),
  upsertScheduler: async ({ queue: name, id, repeat, template }) => {
    const { name: jobName, data, opts } = template || {};
    const first = await queue(name).upsertJobScheduler(id, repeat, { name: jobName, data, opts });
    return first ? first.id : null;
  },
  removeScheduler: ({ queue: name, id }) => queue(name).removeJobScheduler(id),
  getSchedulers: ({ queue: name }) => queue(name).getJobSchedulers(0, -1, true),
  getScheduler: ({ queue: name, id }) => queue(name).getJobScheduler(id).then((found) => found || null),
  // opts: the Worker's options, and `customBackoff` ({type, ms}): the custom backoff
  // strategy (BullMQ takes one for every custom type), always waiting ms.
  startWorker: ({ queue: name, opts }) => {
    const { customBackoff, ...workerOpts } = opts || {};
    const settings = customBackoff ? { backoffStrategy: () => customBackoff.ms } : {};
    const worker = new Worker(name, (job, token) => runSteps(job, token, worker), {
      connection: { ...connection, maxRetriesPerRequest: null },
      settings,
      ...workerOpts,
    });
    const seen = { errors: [] };
    worker.on('error', (err) => seen.errors.push(String(err && err.message)));
    return keep({ worker, seen });
  },
  workerErrors: ({ handle }) => handles.get(handle).seen.errors,
  stopWorker: async ({ handle }) => {
    const { worker, seen } = handles.get(handle);
    handles.delete(handle);
    await worker.close();
    return seen.errors;
  },
  startEvents: async ({ queue: name }) => {
    const events = new QueueEvents(name, { connection, lastEventId: '0' });
    const seen = [];
    const names = ['added', 'waiting', 'active', 'progress', 'completed', 'failed', 'delayed',
      'removed', 'paused', 'resumed', 'retries-exhausted', 'waiting-children', 'deduplicated',
      'duplicated', 'stalled', 'drained', 'cleaned'];
    for (const event of names) events.on(event, (args) => seen.push({ event, args: args && typeof args === 'object' ? args : {} }));
    await events.waitUntilReady();
    return keep({ events, seen });
  },
  events: ({ handle }) => handles.get(handle).seen,
  stopEvents: async ({ handle }) => {
    const { events, seen } = handles.get(handle);
    handles.delete(handle);
    await events.close();
    return seen;
  },
  version: () => require('bullmq/package.json').version,
};

async function serve(line) {
  const request = JSON.parse(line);
  try {
    const result = await ops[request.op](request);
    return { req: request.req, ok: result === undefined ? null : result };
  } catch (err) {
    return { req: request.req, error: String(err && err.stack ? err.stack : err) };
  }
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  serve(line).then((answer) => process.stdout.write(`${JSON.stringify(answer)}\n`));
});
lines.on('close', async () => {
  for (const { worker, events } of handles.values()) await (worker || events).close();
  for (const one of queues.values()) await one.close();
  process.exit(0);
});
