// Process jobs with a Node BullMQ worker until <count> jobs finished (completed or failed
// for good): node work.js <queue> <redis url> <count>. A job with data.fail throws.
// The processor returns {doubled: data.n * 2, name}. Prints {id: outcome} (JSON).
const { Worker } = require('bullmq');

(async () => {
  const [queueName, url, count] = process.argv.slice(2);
  const outcomes = {};
  let finished = 0;
  await new Promise((resolve, reject) => {
    const worker = new Worker(queueName, async (job) => {
      if (job.data.fail) throw new Error('node says no');
      return { doubled: job.data.n * 2, name: job.name };
    }, { connection: { url, maxRetriesPerRequest: null } });
    const done = () => { if (++finished >= Number(count)) worker.close().then(resolve, reject); };
    worker.on('completed', (job, value) => { outcomes[job.id] = { state: 'completed', value }; done(); });
    worker.on('failed', (job, err) => {
      if (job.attemptsMade >= (job.opts.attempts || 1)) {
        outcomes[job.id] = { state: 'failed', reason: err.message, attemptsMade: job.attemptsMade };
        done();
      }
    });
    worker.on('error', reject);
    setTimeout(() => reject(new Error('timed out waiting for jobs')), 20000).unref();  // never keeps node alive
  });
  console.log(JSON.stringify(outcomes));
})().catch((err) => { console.error(err); process.exit(1); });
