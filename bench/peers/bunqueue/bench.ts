// The peer side of bench/run.py: bunqueue running the same workloads, in embedded (in-process)
// mode, or with {"port": P, "serverPid": N} against a bunqueue TCP server on 127.0.0.1:P that
// run.py started (memory is then the server's resident memory). Prints one JSON object of
// figures. Usage: bun bench.ts '{"jobs":20000,...}'
import { FlowProducer, Queue, Worker } from "bunqueue/client";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const TCP: boolean = typeof cfg.port === "number";
const conn: Record<string, unknown> = TCP
  ? { connection: { host: "127.0.0.1", port: cfg.port } }
  : { embedded: true };
const JOBS: number = cfg.jobs ?? 20000;
const SINGLE: number = cfg.single ?? 5000;
const BATCH: number = cfg.batch ?? 1000;
const RATE: number = cfg.rate ?? 500;
const SECONDS: number = cfg.seconds ?? 3;
const MEMORY_JOBS: number = cfg.memoryJobs ?? 100000;
const TREES: number = cfg.trees ?? 1000;

let serial = 0;
const fresh = (label: string) => `${label}-${process.pid}-${serial++}`;
const now = () => performance.now();

async function addOne(): Promise<number> {
  const q = new Queue(fresh("single"), conn);
  const t = now();
  for (let i = 0; i < SINGLE; i++) await q.add("x", { i });
  return SINGLE / ((now() - t) / 1000);
}

async function fill(q: Queue, n: number): Promise<number> {
  const t = now();
  for (let i = 0; i < n; i += BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) batch.push({ name: "x", data: { i: j } });
    await q.addBulk(batch);
  }
  return n / ((now() - t) / 1000);
}

async function addBulk(): Promise<number> {
  return fill(new Queue(fresh("bulk"), conn), JOBS);
}

async function processing(concurrency: number): Promise<number> {
  const name = fresh(`c${concurrency}`);
  const q = new Queue(name, conn);
  await fill(q, JOBS);
  let done = 0;
  const t = now();
  await new Promise<void>((resolve) => {
    const w = new Worker(name, async () => null, { ...conn, concurrency });
    w.on("completed", () => {
      if (++done === JOBS) {
        w.close();
        resolve();
      }
    });
  });
  return JOBS / ((now() - t) / 1000);
}

async function latency(): Promise<{ p50: number; p99: number }> {
  const name = fresh("latency");
  const q = new Queue(name, conn);
  const samples: number[] = [];
  const w = new Worker(
    name,
    async (job: any) => {
      samples.push(now() - job.data.t);
      return null;
    },
    { ...conn, concurrency: 10 },
  );
  await q.add("x", { t: now() }); // one job through first, as on every side: a running worker
  while (samples.length < 1) await Bun.sleep(1);
  samples.length = 0;
  const total = RATE * SECONDS;
  const start = now();
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / RATE;
    const wait = due - now();
    if (wait > 0) await Bun.sleep(wait);
    await q.add("x", { t: now() });
  }
  while (samples.length < total) await Bun.sleep(5);
  await w.close();
  samples.sort((a, b) => a - b);
  const pick = (f: number) => samples[Math.min(samples.length - 1, Math.floor(f * samples.length))];
  return { p50: pick(0.5), p99: pick(0.99) };
}

async function flows(): Promise<{ added: number; processed: number }> {
  const parents = fresh("parents");
  const children = fresh("children");
  const producer = new FlowProducer(conn);
  const tree = (i: number) => ({
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
  const kids = new Worker(children, async () => null, { ...conn, concurrency: 100 });
  await new Promise<void>((resolve) => {
    const tops = new Worker(parents, async () => null, { ...conn, concurrency: 100 });
    tops.on("completed", () => {
      if (++finished === TREES) {
        tops.close();
        resolve();
      }
    });
  });
  const processed = TREES / ((now() - t) / 1000);
  await kids.close();
  return { added, processed };
}

async function rss(): Promise<number> {
  if (!TCP) return process.memoryUsage().rss;
  const statm = await Bun.file(`/proc/${cfg.serverPid}/statm`).text();
  return Number(statm.split(" ")[1]) * 4096;
}

async function memory(): Promise<number> {
  Bun.gc(true);
  const before = await rss();
  await fill(new Queue(fresh("memory"), conn), MEMORY_JOBS);
  Bun.gc(true);
  return ((await rss()) - before) / MEMORY_JOBS;
}

const result = {
  peer: "bunqueue",
  version: (await import("bunqueue/package.json")).version,
  add_single: await addOne(),
  add_bulk: await addBulk(),
  c10: await processing(10),
  c100: await processing(100),
  latency: await latency(),
  flows: await flows(),
  bytes_per_waiting_job: await memory(),
};
console.log(JSON.stringify(result));
process.exit(0);
