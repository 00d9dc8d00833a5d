// Read jobs back with Node BullMQ 6 on Postgres:
// node pg/inspect.js <queue> <postgres url> <schema> '<[ids]>'.
// Prints {id: {state, name, data, returnvalue, progress, attemptsMade, failedReason}}.
const { Queue } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [queueName, url, schema, idsJson] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: connect(url, schema) });
  const seen = {};
  for (const id of JSON.parse(idsJson)) {
    const job = await queue.getJob(id);
    seen[id] = job ? {
      state: await job.getState(),
      name: job.name,
      data: job.data,
      returnvalue: job.returnvalue,
      progress: job.progress,
      attemptsMade: job.attemptsMade,
      failedReason: job.failedReason,
    } : null;
  }
  seen.counts = await queue.getJobCounts('wait', 'active', 'completed', 'failed', 'delayed', 'prioritized');
  console.log(JSON.stringify(seen));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
