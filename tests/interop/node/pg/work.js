// Process jobs with a Node BullMQ 6 worker on Postgres until <count> jobs finished
// (completed, or failed for good): node pg/work.js <queue> <postgres url> <schema> <count>.
// The processor reports progress 50, throws for data.fail, else returns
// {doubled: data.n * 2, name}. Prints {id: outcome} (JSON).
const { Worker } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [queueName, url, schema, count] = process.argv.slice(2);
  const outcomes = {};
  let finished = 0;
  await new Promise((resolve, reject) => {
    const worker = new Worker(queueName, async (job) => {
      await job.updateProgress(50);
      if (job.data.fail) throw new Error('node says no');
      return { doubled: job.data.n * 2, name: job.name };
    }, { connection: connect(url, schema) });
    const done = () => { if (++finished >= Number(count)) worker.close().then(resolve, reject); };
    worker.on('completed', (job, value) => { outcomes[job.id] = { state: 'completed', value }; done(); });
    worker.on('failed', (job, err) => {
      if (job.attemptsMade >= (job.opts.attempts || 1)) {
        outcomes[job.id] = { state: 'failed', reason: err.message, attemptsMade: job.attemptsMade };
        done();
      }
    });
    worker.on('error', reject);
    setTimeout(() => reject(new Error('timed out waiting for jobs')), 30000).unref();
  });
  console.log(JSON.stringify(outcomes));
})().catch((err) => { console.error(err); process.exit(1); });
