// The peer side of bench/run.py for redis:// URLs: Node BullMQ on the same Redis server, running
// the same workloads. Prints one JSON object of figures.
// Usage: REDIS_URL=redis://127.0.0.1:6379/0 [PEER_PACKAGE=bullmq6] node bench.mjs '{"jobs":20000,...}'
// PEER_PACKAGE names the installed package to run: bullmq (5.x) or bullmq6 (an npm alias of
// bullmq 6, package.json), so both versions run the same workloads from one script.
// With REDIS_CLUSTER=host:port,... (the cluster table, bench/harness/cluster.py) each Queue
// and Worker gets its own ioredis Cluster (BullMQ's documented cluster setup: an
// IORedis.Cluster as `connection`, maxRetriesPerRequest null in its redisOptions, a hash
// tag in each queue's name). With REDIS_PIDS=pid,... each row also reports its CPU per
// job: this process's and each Redis node's (/proc), as `cpu` {row: {client_us, redis_us}}.
import IORedis from "ioredis";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";

const PACKAGE = process.env.PEER_PACKAGE ?? "bullmq";
const { FlowProducer, Queue, Worker } = await import(PACKAGE);
const cfg = JSON.parse(process.argv[2] ?? "{}");
const JOBS = cfg.jobs ?? 20000;
const SINGLE = cfg.single ?? 5000;
const BATCH = cfg.batch ?? 1000;
const RATE = cfg.rate ?? 500;
const SECONDS = cfg.seconds ?? 3;
const MEMORY_JOBS = cfg.memoryJobs ?? 100000;
const TREES = cfg.trees ?? 1000;
const URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379/0";
const CLUSTER = process.env.REDIS_CLUSTER?.split(",").map((node) => {
  const [host, port] = node.split(":");
  return { host, port: Number(port) };
});
const clusterConnection = () =>
  new IORedis.Cluster(CLUSTER, { redisOptions: { maxRetriesPerRequest: null } });
const connections = [];
const opened = (connection) => {
  connections.push(connection);
  return connection;
};
// An options object (BullMQ opens a connection per Queue/Worker), or a new Cluster each.
const connect = () => (CLUSTER ? opened(clusterConnection()) : { url: URL, maxRetriesPerRequest: null });

const PIDS = (process.env.REDIS_PIDS ?? "").split(",").filter(Boolean);
const TICK = 100; // clock ticks per second of /proc/<pid>/stat (USER_HZ)
const redisCpu = () =>
  PIDS.map((pid) => {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().split(/\s+/);
    return (Number(fields[11]) + Number(fields[12])) / TICK;
  });
const cpuRead = () => ({ client: process.cpuUsage(), redis: redisCpu() });
const cpu = {};
const cost = (key, before, jobs) => {
  const after = cpuRead();
  const used = process.cpuUsage(before.client);
  cpu[key] = {
    client_us: (used.user + used.system) / jobs,
    redis_us: after.redis.map((seconds, i) => ((seconds - before.redis[i]) / jobs) * 1e6),
  };
};

let serial = 0;
// Each queue's own hash tag (one slot per queue on a cluster; a flow's two queues share one).
const fresh = (label) => `bullmq-bench-{${label}-${process.pid}-${serial++}}`;
const now = () => performance.now();
const queues = [];
const queue = (name) => {
  const q = new Queue(name, { connection: connect() });
  queues.push(q);
  return q;
};

async function addOne() {
  const q = queue(fresh("single"));
  await q.waitUntilReady();
  const before = cpuRead();
  const t = now();
  for (let i = 0; i < SINGLE; i++) await q.add("x", { i });
  const rate = SINGLE / ((now() - t) / 1000);
  cost("add_single", before, SINGLE);
  return rate;
}

async function fill(q, n) {
  const t = now();
  for (let i = 0; i < n; i += BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) batch.push({ name: "x", data: { i: j } });
    await q.addBulk(batch);
  }
  return n / ((now() - t) / 1000);
}

async function addBulk() {
  const q = queue(fresh("bulk"));
  await q.waitUntilReady();
  const before = cpuRead();
  const rate = await fill(q, JOBS);
  cost("add_bulk", before, JOBS);
  return rate;
}

async function processing(concurrency) {
  const name = fresh(`c${concurrency}`);
  await fill(queue(name), JOBS);
  let done = 0;
  const before = cpuRead();
  const t = now();
  await new Promise((resolve) => {
    const w = new Worker(name, async () => null, { connection: connect(), concurrency });
    w.on("completed", () => {
      if (++done === JOBS) {
        cost(`c${concurrency}`, before, JOBS);
        w.close().then(resolve);
      }
    });
  });
  return JOBS / ((now() - t) / 1000);
}

async function latency() {
  const name = fresh("latency");
  const q = queue(name);
  const samples = [];
  const w = new Worker(name, async (job) => {
    samples.push(now() - job.data.t);
    return null;
  }, { connection: connect(), concurrency: 10 });
  await w.waitUntilReady();
  await q.add("x", { t: now() }); // one job through first, as on every side: a running worker
  while (samples.length < 1) await sleep(1);
  samples.length = 0;
  const total = RATE * SECONDS;
  const start = now();
  for (let i = 0; i < total; i++) {
    const wait = start + (i * 1000) / RATE - now();
    if (wait > 0) await sleep(wait);
    await q.add("x", { t: now() });
  }
  while (samples.length < total) await sleep(5);
  await w.close();
  samples.sort((a, b) => a - b);
  const pick = (f) => samples[Math.min(samples.length - 1, Math.floor(f * samples.length))];
  return { p50: pick(0.5), p99: pick(0.99) };
}

async function flows() {
  const tag = fresh("flows"); // one slot for both queues: a flow's scripts touch both
  const parents = `${tag}parents`;
  const children = `${tag}children`;
  const producer = new FlowProducer({ connection: connect() });
  await producer.waitUntilReady();
  const before = cpuRead();
  const tree = (i) => ({
    name: "parent",
    queueName: parents,
    data: { i },
    children: Array.from({ length: 10 }, (_, k) => ({ name: "child", queueName: children, data: { k } })),
  });
  let t = now();
  for (let i = 0; i < TREES; i += 100) {
    const batch = [];
    for (let j = i; j < Math.min(TREES, i + 100); j++) batch.push(tree(j));
    await producer.addBulk(batch);
  }
  const added = TREES / ((now() - t) / 1000);
  let finished = 0;
  t = now();
  const kids = new Worker(children, async () => null, { connection: connect(), concurrency: 100 });
  await new Promise((resolve) => {
    const tops = new Worker(parents, async () => null, { connection: connect(), concurrency: 100 });
    tops.on("completed", () => {
      if (++finished === TREES) {
        cost("flows", before, TREES * 11);
        tops.close().then(resolve);
      }
    });
  });
  const processed = TREES / ((now() - t) / 1000);
  await kids.close();
  await producer.close();
  queues.push(new Queue(parents, { connection: connect() }), new Queue(children, { connection: connect() }));
  return { added, processed };
}

// Bytes of Redis memory (INFO used_memory) per waiting job: the jobs live in Redis.
async function memory() {
  const nodes = CLUSTER ? CLUSTER.map((node) => new IORedis(node)) : [new IORedis(URL)];
  const usedOne = async (redis) => Number((await redis.info("memory")).match(/used_memory:(\d+)/)[1]);
  const used = async () => (await Promise.all(nodes.map(usedOne))).reduce((a, b) => a + b, 0);
  const before = await used();
  const q = queue(fresh("memory"));
  await fill(q, MEMORY_JOBS);
  const per = ((await used()) - before) / MEMORY_JOBS;
  for (const redis of nodes) await redis.quit();
  return per;
}

const version = createRequire(import.meta.url)(`${PACKAGE}/package.json`).version;
const result = {
  peer: PACKAGE,
  version,
  add_single: await addOne(),
  add_bulk: await addBulk(),
  c10: await processing(10),
  c100: await processing(100),
  latency: await latency(),
  flows: await flows(),
  bytes_per_waiting_job: await memory(),
  cpu,
};
for (const q of queues) {
  await q.obliterate({ force: true });
  await q.close();
}
for (const connection of connections) connection.disconnect();
console.log(JSON.stringify(result));
process.exit(0);
