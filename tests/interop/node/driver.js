// One long-lived Node BullMQ process serving the interop matrix: node driver.js
// Reads one JSON request a line on stdin, {req, op, store, ...args}, and answers each with one
// JSON line on stdout, {req, ok: result} or {req, error: message}. Requests run concurrently.
// A store is named once with `use` ({store: "redis", url} or {store: "postgres",
// connectionString, schema}: BullMQ 6's Postgres backend, which migrates the schema), then
// every request names the store it concerns, so one process serves Redis and Postgres.
// Workers run the processor below: it follows the steps in job.data.steps (see `runSteps`),
// the same small language tests/interop/sides.py gives psyq's workers.
const readline = require('readline');
const bullmq = require('bullmq');

// stdout carries the answers only: anything a library logs goes to stderr.
console.log = console.error;
console.info = console.error;

const { DelayedError, WaitingChildrenError, UnrecoverableError, RateLimitError } = bullmq;
const stores = new Map(); // store -> {classes, connection, workerConnection}
const queues = new Map(); // `${store}:${name}` -> Queue
const handles = new Map();
let nextHandle = 0;

function backend(store) {
  if (!stores.has(store)) throw new Error(`store ${store} is not in use: send {op: "use"} first`);
  return stores.get(store);
}

async function use({ store, url, connectionString, schema }) {
  if (store === 'redis') {
    const connection = { url };
    stores.set(store, {
      classes: bullmq,
      connection,
      workerConnection: { ...connection, maxRetriesPerRequest: null },
    });
  } else if (store === 'postgres') {
    const connection = { connectionString, schema, migrate: true };
    const classes = bullmq.withBackend(bullmq.createPostgresBackend);
    stores.set(store, { classes, connection, workerConnection: connection });
    const probe = new classes.Queue('psyq-interop-probe', { connection });
    await probe.waitUntilReady(); // the schema is migrated before any case runs
    await probe.close();
  } else {
    throw new Error(`unknown store ${store}`);
  }
  return require('bullmq/package.json').version;
}

function queue(store, name) {
  const key = `${store}:${name}`;
  if (!queues.has(key)) {
    const { classes, connection } = backend(store);
    queues.set(key, new classes.Queue(name, { connection }));
  }
  return queues.get(key);
}

function keep(thing) {
  nextHandle += 1;
  handles.set(nextHandle, thing);
  return nextHandle;
}

// The state is read first: once final, the fields read after it are final too.
async function job(store, name, id) {
  const state = await queue(store, name).getJobState(id);
  const found = await queue(store, name).getJob(id);
  if (!found) return null;
  const logs = await queue(store, name).getJobLogs(id);
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
async function runSteps(store, job, token, worker) {
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
      await queue(store, step.child.queue).add(step.child.name, step.child.data, { parent });
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
  add: ({ store, queue: name, name: jobName, data, opts }) =>
    queue(store, name).add(jobName, data, opts || {}).then((added) => added.id),
  addBulk: ({ store, queue: name, jobs }) =>
    queue(store, name).addBulk(jobs).then((added) => added.map((one) => one.id)),
  flow: async ({ store, tree }) => {
    const { classes, connection } = backend(store);
    const producer = new classes.FlowProducer({ connection });
    try {
      const ids = (node) => ({ id: node.job.id, children: (node.children || []).map(ids) });
      return ids(await producer.add(tree));
    } finally {
      await producer.close();
    }
  },
  job: ({ store, queue: name, id }) => job(store, name, id),
  counts: ({ store, queue: name, types }) => queue(store, name).getJobCounts(...(types || [])),
  getJobs: ({ store, queue: name, types, start, end, asc }) =>
    queue(store, name).getJobs(types, start || 0, end === undefined ? -1 : end, asc || false)
      .then((found) => found.filter(Boolean).map((one) => one.id)),
  pause: ({ store, queue: name }) => queue(store, name).pause(),
  resume: ({ store, queue: name }) => queue(store, name).resume(),
  isPaused: ({ store, queue: name }) => queue(store, name).isPaused(),
  retry: async ({ store, queue: name, id, state }) => (await queue(store, name).getJob(id)).retry(state || 'failed'),
  promote: async ({ store, queue: name, id }) => (await queue(store, name).getJob(id)).promote(),
  remove: ({ store, queue: name, id }) => queue(store, name).remove(id),
  changePriority: async ({ store, queue: name, id, priority }) =>
    (await queue(store, name).getJob(id)).changePriority({ priority }),
  changeDelay: async ({ store, queue: name, id, delay }) => (await queue(store, name).getJob(id)).changeDelay(delay),
  updateData: async ({ store, queue: name, id, data }) => (await queue(store, name).getJob(id)).updateData(data),
  drain: ({ store, queue: name, delayed }) => queue(store, name).drain(delayed || false),
  clean: ({ store, queue: name, grace, limit, type }) => queue(store, name).clean(grace, limit, type),
  obliterate: ({ store, queue: name }) => queue(store, name).obliterate({ force: true }),
  workers: ({ store, queue: name }) => queue(store, name).getWorkers().then((found) => found.length),
  retryJobs: ({ store, queue: name, state }) => queue(store, name).retryJobs({ state: state || 'failed' }),
  promoteJobs: ({ store, queue: name }) => queue(store, name).promoteJobs(),
  setGlobalConcurrency: ({ store, queue: name, concurrency }) => queue(store, name).setGlobalConcurrency(concurrency),
  setGlobalRateLimit: ({ store, queue: name, max, duration }) => queue(store, name).setGlobalRateLimit(max, duration),
  getDeduplicationJobId: ({ store, queue: name, dedupId }) => queue(store, name).getDeduplicationJobId(dedupId),
  upsertScheduler: async ({ store, queue: name, id, repeat, template }) => {
    const { name: jobName, data, opts } = template || {};
    const first = await queue(store, name).upsertJobScheduler(id, repeat, { name: jobName, data, opts });
    return first ? first.id : null;
  },
  removeScheduler: ({ store, queue: name, id }) => queue(store, name).removeJobScheduler(id),
  getSchedulers: ({ store, queue: name }) => queue(store, name).getJobSchedulers(0, -1, true),
  getScheduler: ({ store, queue: name, id }) => queue(store, name).getJobScheduler(id).then((found) => found || null),
  // opts: the Worker's options, and `customBackoff` ({type, ms}): the custom backoff
  // strategy (BullMQ takes one for every custom type), always waiting ms.
  startWorker: ({ store, queue: name, opts }) => {
    const { customBackoff, ...workerOpts } = opts || {};
    const settings = customBackoff ? { backoffStrategy: () => customBackoff.ms } : {};
    const { classes, workerConnection } = backend(store);
    const worker = new classes.Worker(name, (job, token) => runSteps(store, job, token, worker), {
      connection: workerConnection,
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
  startEvents: async ({ store, queue: name }) => {
    const { classes, connection } = backend(store);
    const events = new classes.QueueEvents(name, { connection, lastEventId: '0' });
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
  use,
  // Close the store's Queue objects of these queues (a case's end: each holds connections).
  forget: async ({ store, queues: names }) => {
    for (const name of names) {
      const key = `${store}:${name}`;
      const found = queues.get(key);
      queues.delete(key);
      if (found) await found.close();
    }
  },
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
