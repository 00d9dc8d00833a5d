// Add a flow with Node BullMQ's FlowProducer: node flow.js <parent queue> <child queue> <redis url>
// One parent with three children. Prints {parent: id, children: [ids]} (JSON).
const { FlowProducer } = require('bullmq');

(async () => {
  const [parentQueue, childQueue, url] = process.argv.slice(2);
  const producer = new FlowProducer({ connection: { url } });
  const tree = await producer.add({
    name: 'parent',
    queueName: parentQueue,
    data: { n: 0 },
    children: [1, 2, 3].map((n) => ({ name: 'child', queueName: childQueue, data: { n } })),
  });
  console.log(JSON.stringify({ parent: tree.job.id, children: tree.children.map((c) => c.job.id) }));
  await producer.close();
})().catch((err) => { console.error(err); process.exit(1); });
