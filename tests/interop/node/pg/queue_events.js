// List a queue's QueueEvents as Node BullMQ 6 on Postgres lists them (the sessions named
// `<queue>:qe`): node pg/queue_events.js <queue> <postgres url> <schema>.
// Prints {count, names}.
const { Queue } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [queueName, url, schema] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: connect(url, schema) });
  const found = await queue.getQueueEvents();
  console.log(JSON.stringify({ count: found.length, names: found.map((one) => one.name) }));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
