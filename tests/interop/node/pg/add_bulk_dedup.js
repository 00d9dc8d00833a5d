// Deduplicated bulk adds with Node BullMQ 6 on Postgres (issue 40's producer):
// node pg/add_bulk_dedup.js <queue> <postgres url> <schema> <batches> <seed>
// Each batch: addBulk of 50 jobs, deduplication ids drawn from 40, priorities 0-2.
// A failed call is counted, not fatal. Prints {calls, failed, errors}.
const { Queue } = require('bullmq');
const connect = require('./connect');

function random(seed) {
  // a small deterministic generator (mulberry32), so a run can be repeated
  let state = seed >>> 0;
  return (n) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) % n);
  };
}

(async () => {
  const [queueName, url, schema, batches, seed] = process.argv.slice(2);
  const queue = new Queue(queueName, { connection: connect(url, schema) });
  const pick = random(Number(seed));
  const result = { calls: 0, failed: 0, errors: [] };
  for (let b = 0; b < Number(batches); b++) {
    const jobs = [];
    for (let n = 0; n < 50; n++) {
      jobs.push({
        name: 'node-dedup',
        data: { n },
        opts: { deduplication: { id: `d${pick(40)}` }, priority: pick(3) },
      });
    }
    result.calls += 1;
    try {
      await queue.addBulk(jobs);
    } catch (err) {
      result.failed += 1;
      if (result.errors.length < 3) result.errors.push(String(err.message || err));
    }
  }
  console.log(JSON.stringify(result));
  await queue.close();
})().catch((err) => { console.error(err); process.exit(1); });
