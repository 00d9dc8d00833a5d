// Add jobs with Node BullMQ: node add.js <queue> <redis url> '<[{name, data, opts}]>'
// Prints the ids (JSON).
const { Queue } = require('bullmq');

(async () => {
  const [queueName, url, jobsJson] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: { url } });
  const ids = [];
  for (const { name, data, opts } of JSON.parse(jobsJson)) {
    ids.push((await queue.add(name, data, opts || {})).id);
  }
  console.log(JSON.stringify(ids));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
