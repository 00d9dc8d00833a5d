// Add jobs with Node BullMQ 6 on Postgres:
// node pg/add.js <queue> <postgres url> <schema> '<[{name, data, opts}]>'. Prints the ids.
const { Queue } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [queueName, url, schema, jobsJson] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: connect(url, schema) });
  const ids = [];
  for (const { name, data, opts } of JSON.parse(jobsJson)) {
    ids.push((await queue.add(name, data, opts || {})).id);
  }
  console.log(JSON.stringify(ids));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
