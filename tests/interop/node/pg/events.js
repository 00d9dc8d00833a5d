// Listen with Node BullMQ 6's QueueEvents on Postgres until <count> jobs completed or
// failed (read from the stream's start): node pg/events.js <queue> <url> <schema> <count>.
// Prints {completed: {id: returnvalue}, failed: {id: reason}} (JSON).
const { QueueEvents } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [queueName, url, schema, count] = process.argv.slice(2);
  const events = new QueueEvents(queueName, { connection: connect(url, schema), lastEventId: '0' });
  const seen = { completed: {}, failed: {} };
  let finished = 0;
  // The listeners go on before the first await: QueueEvents starts reading in its
  // constructor, and an event read before a listener is attached is gone (it read the
  // stream's start ahead of waitUntilReady's own round trip on a loaded host).
  const heard = new Promise((resolve, reject) => {
    const done = () => { if (++finished >= Number(count)) resolve(); };
    events.on('completed', ({ jobId, returnvalue }) => { seen.completed[jobId] = returnvalue; done(); });
    events.on('failed', ({ jobId, failedReason }) => { seen.failed[jobId] = failedReason; done(); });
    events.on('error', reject);
    setTimeout(() => reject(new Error('timed out waiting for events')), 30000).unref();
  });
  await events.waitUntilReady();
  await heard;
  console.log(JSON.stringify(seen));
  await events.close();
})().catch((err) => { console.error(err); process.exit(1); });
