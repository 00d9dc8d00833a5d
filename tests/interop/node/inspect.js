// Read jobs back with Node BullMQ: node inspect.js <queue> <redis url> '<[ids]>'
// Prints {id: {state, returnvalue, attemptsMade, failedReason, name, data, telemetry}} (JSON).
const { Queue } = require('bullmq');

(async () => {
  const [queueName, url, idsJson] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: { url } });
  const found = {};
  for (const id of JSON.parse(idsJson)) {
    const job = await queue.getJob(id);
    found[id] = job && {
      state: await job.getState(),
      returnvalue: job.returnvalue,
      attemptsMade: job.attemptsMade,
      failedReason: job.failedReason,
      name: job.name,
      data: job.data,
      telemetry: job.opts.telemetry,
    };
  }
  found.counts = await queue.getJobCounts();
  console.log(JSON.stringify(found));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
