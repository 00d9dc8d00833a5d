// Run a flow's jobs with Node BullMQ 6 workers on Postgres until its parent completed:
// node pg/work_flow.js <parent queue> <child queue> <postgres url> <schema>
// Children return {doubled: data.n * 2}; the parent returns {sum, keys} of its children's
// values. Prints the parent's return value (JSON).
const { Worker } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [parentQueue, childQueue, url, schema] = process.argv.slice(2);
  const connection = connect(url, schema);
  const kids = new Worker(childQueue, async (job) => ({ doubled: job.data.n * 2 }), { connection });
  let result;
  await new Promise((resolve, reject) => {
    const tops = new Worker(parentQueue, async (job) => {
      const values = await job.getChildrenValues();
      result = {
        sum: Object.values(values).reduce((total, value) => total + value.doubled, 0),
        keys: Object.keys(values).sort(),
      };
      return result;
    }, { connection });
    tops.on('completed', () => tops.close().then(resolve, reject));
    tops.on('error', reject);
    kids.on('error', reject);
    setTimeout(() => reject(new Error('timed out waiting for the parent')), 30000).unref();
  });
  await kids.close();
  console.log(JSON.stringify(result));
})().catch((err) => { console.error(err); process.exit(1); });
