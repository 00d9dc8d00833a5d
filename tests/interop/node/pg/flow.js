// Add a flow with Node BullMQ 6's FlowProducer on Postgres:
// node pg/flow.js <parent queue> <child queue> <postgres url> <schema>
// One parent with three children. Prints {parent: id, children: [ids]} (JSON).
const { FlowProducer } = require('bullmq');
const connect = require('./connect');

(async () => {
  const [parentQueue, childQueue, url, schema] = process.argv.slice(2);
  const producer = new FlowProducer({ connection: connect(url, schema) });
  const tree = await producer.add({
    name: 'parent',
    queueName: parentQueue,
    data: { n: 0 },
    children: [1, 2, 3].map((n) => ({ name: 'child', queueName: childQueue, data: { n } })),
  });
  console.log(JSON.stringify({ parent: tree.job.id, children: tree.children.map((c) => c.job.id) }));
  await producer.close();
})().catch((err) => { console.error(err); process.exit(1); });
