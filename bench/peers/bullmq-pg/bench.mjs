// The peer side of bench/run.py for postgresql:// URLs: Node BullMQ 6 on its own
// PostgreSQL backend (a fresh schema of the same server, migrated by BullMQ, dropped at
// the end), running the same workloads as the Redis peer. Prints one JSON object.
// Usage: PSYQ_BENCH_PG_DSN=postgresql://... node bench.mjs '{"jobs":20000,...}'
import {
  FlowProducer,
  Queue,
  Worker,
  createPostgresBackend,
  setDefaultBackendFactory,
} from "bullmq";
import pg from "pg";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";

setDefaultBackendFactory(createPostgresBackend);

const cfg = JSON.parse(process.argv[2] ?? "{}");
const JOBS = cfg.jobs ?? 20000;
const SINGLE = cfg.single ?? 5000;
const BATCH = cfg.batch ?? 1000;
const RATE = cfg.rate ?? 500;
const SECONDS = cfg.seconds ?? 3;
const MEMORY_JOBS = cfg.memoryJobs ?? 100000;
const TREES = cfg.trees ?? 1000;
const DSN = process.env.PSYQ_BENCH_PG_DSN ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const SCHEMA = `bullmq_bench_${process.pid}`;
const connection = { connectionString: DSN, schema: SCHEMA, migrate: true };

let serial = 0;
const fresh = (label) => `bullmq-bench-${label}-${process.pid}-${serial++}`;
const now = () => performance.now();
const queues = [];
const queue = (name) => {
  const q = new Queue(name, { connection });
  queues.push(q);
  return q;
};

async function addOne() {
  const q = queue(fresh("single"));
  const t = now();
  for (let i = 0; i < SINGLE; i++) await q.add("x", { i });
  return SINGLE / ((now() - t) / 1000);
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
  return fill(queue(fresh("bulk")), JOBS);
}

// `probe()` runs just before the Worker starts and just after its last completion.
async function processing(concurrency, probe = async () => {}) {
  const name = fresh(`c${concurrency}`);
  await fill(queue(name), JOBS);
  let done = 0;
  await probe();
  const t = now();
  await new Promise((resolve) => {
    const w = new Worker(name, async () => null, { connection, concurrency });
    w.on("completed", () => {
      if (++done === JOBS) probe().then(() => w.close()).then(resolve);
    });
  });
  return JOBS / ((now() - t) / 1000);
}

// bench/studies/pg_costs.py's counters, named as bench/peers/pg_counters.py's snapshot() names them (it
// says what each one is); pg_costs.py turns two of them into the figures per job.
async function counters(client) {
  const sql = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid, " +
    "(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal";
  const { xid, wal } = (await client.query(sql)).rows[0];
  const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0].split(/\s+/).slice(1, 9).map(Number);
  const ticks = 100; // USER_HZ on Linux
  const { user, system } = process.cpuUsage();
  return {
    xid: Number(xid), wal: Number(wal), wall: now() / 1000,
    host_cpu: (cpu.reduce((a, b) => a + b, 0) - cpu[3] - cpu[4]) / ticks,
    own_cpu: (user + system) / 1e6,
  };
}

// Per concurrency, the counters just before the Worker starts and after its last completion.
async function costs(client, levels) {
  const rows = {};
  for (const concurrency of levels) {
    const marks = [];
    await processing(concurrency, async () => marks.push(await counters(client)));
    rows[`Node BullMQ 6 c${concurrency}`] = { before: marks[0], after: marks[1] };
  }
  return rows;
}

async function latency() {
  const name = fresh("latency");
  const q = queue(name);
  const samples = [];
  const w = new Worker(name, async (job) => {
    samples.push(now() - job.data.t);
    return null;
  }, { connection, concurrency: 10 });
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
  const parents = fresh("parents");
  const children = fresh("children");
  const producer = new FlowProducer({ connection });
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
  const kids = new Worker(children, async () => null, { connection, concurrency: 100 });
  await new Promise((resolve) => {
    const tops = new Worker(parents, async () => null, { connection, concurrency: 100 });
    tops.on("completed", () => {
      if (++finished === TREES) tops.close().then(resolve);
    });
  });
  const processed = TREES / ((now() - t) / 1000);
  await kids.close();
  await producer.close();
  return { added, processed };
}

// Bytes of the schema's job table and indexes per waiting job.
async function memory(client) {
  const size = async () =>
    Number((await client.query(`SELECT pg_total_relation_size('"${SCHEMA}".job') AS n`)).rows[0].n);
  const before = await size();
  await fill(queue(fresh("memory")), MEMORY_JOBS);
  return ((await size()) - before) / MEMORY_JOBS;
}

async function allRows(client) {
  const version = createRequire(import.meta.url)("bullmq/package.json").version;
  return {
    peer: "bullmq-pg",
    version,
    add_single: await addOne(),
    add_bulk: await addBulk(),
    c10: await processing(10),
    c100: await processing(100),
    latency: await latency(),
    flows: await flows(),
    bytes_per_waiting_job: await memory(client),
  };
}

const client = new pg.Client({ connectionString: DSN });
await client.connect();
try {
  // {"costs": [10, 100]}: bench/studies/pg_costs.py's processing rows alone, with their counters
  const result = cfg.costs ? await costs(client, cfg.costs) : await allRows(client);
  for (const q of queues) await q.close();
  console.log(JSON.stringify(result));
} finally {
  await client.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await client.end();
}
process.exit(0);
