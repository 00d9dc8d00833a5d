// Listen with Node BullMQ's QueueEvents until a job completes:
// node events.js <queue> <redis url> -> prints {event: [args...]} for what it saw (JSON).
// Prints "ready" on stderr once listening.
const { QueueEvents } = require('bullmq');

(async () => {
  const [queueName, url] = process.argv.slice(2);
  const events = new QueueEvents(queueName, { connection: { url }, lastEventId: '0' });
  const seen = {};
  await events.waitUntilReady();
  await new Promise((resolve, reject) => {
    for (const name of ['added', 'waiting', 'active', 'progress', 'completed']) {
      events.on(name, (args) => {
        (seen[name] = seen[name] || []).push(args);
        if (name === 'completed') resolve();
      });
    }
    setTimeout(() => reject(new Error('no completed event')), 20000).unref();  // never keeps node alive
  });
  console.log(JSON.stringify(seen));
  await events.close();
})().catch((err) => { console.error(err); process.exit(1); });
