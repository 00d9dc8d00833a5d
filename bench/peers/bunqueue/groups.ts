// The peer side of bench/studies/groups.py: bunqueue's job groups (its BullMQ Pro-style
// `group: { id }` job option, taken round-robin across groups) running the study's rows, one
// round per call: add (one by one, add_bulk) plain then in 10 groups; processing at c10 and
// c100, plain then with 10 and 10,000 groups; memory per waiting job plain and in 10,000
// groups (embedded only) and what a drained queue still counts in its groups; the fairness
// row (one group holding `heavy` jobs, then 100 groups of 10 added while a c10 worker runs).
// Embedded (in-process, in memory) by default; with {"port": P} against bunqueue's TCP server
// on 127.0.0.1:P that the study started. Prints one JSON object of figures (its last line).
// Usage: bun groups.ts '{"jobs":20000,"heavy":100000,"waiting":200000}'
import { QueuePro as Queue, WorkerPro as Worker } from "bunqueue/client";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const TCP: boolean = typeof cfg.port === "number";
const conn: Record<string, unknown> = TCP
  ? { connection: { host: "127.0.0.1", port: cfg.port } }
  : { embedded: true };
const JOBS: number = cfg.jobs ?? 20000;
const HEAVY: number = cfg.heavy ?? 100000;
const WAITING: number = cfg.waiting ?? 200000;
const DATA = { to: "someone@example.com", template: "welcome", n: 12345 }; // ~60 bytes as JSON

let serial = 0;
const fresh = (label: string) => `g-${label}-${process.pid}-${serial++}`;
const now = () => performance.now();

type Entry = { name: string; data: unknown; opts?: { group: { id: string } } };

function entries(count: number, groups: number, from = 0): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i < from + count; i++) {
    out.push(groups ? { name: "j", data: DATA, opts: { group: { id: String(i % groups) } } } : { name: "j", data: DATA });
  }
  return out;
}

async function fill(q: Queue, count: number, groups: number): Promise<void> {
  for (let start = 0; start < count; start += 1000) {
    await q.addBulk(entries(Math.min(1000, count - start), groups, start));
  }
}

async function addRates(): Promise<Record<string, number>> {
  const found: Record<string, number> = {};
  for (const [label, groups] of [["plain", 0], ["grouped", 10]] as const) {
    const q = new Queue(fresh("add"), conn);
    const single = Math.floor(JOBS / 4);
    let t = now();
    for (const entry of entries(single, groups)) await q.add(entry.name, entry.data, entry.opts);
    found[`add ${label}`] = single / ((now() - t) / 1000);
    t = now();
    await fill(q, JOBS, groups);
    found[`add_bulk ${label}`] = JOBS / ((now() - t) / 1000);
    await q.obliterateAsync();
    await q.close();
  }
  return found;
}

async function processing(concurrency: number, groups: number): Promise<number> {
  const name = fresh(`c${concurrency}`);
  const q = new Queue(name, conn);
  await fill(q, JOBS, groups);
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
  const rate = JOBS / ((now() - t) / 1000);
  await q.obliterateAsync();
  await q.close();
  return rate;
}

async function memory(): Promise<Record<string, number>> {
  const found: Record<string, number> = {};
  for (const [label, groups] of [["plain", 0], ["grouped", 10000]] as const) {
    Bun.gc(true);
    const before = process.memoryUsage().rss;
    const q = new Queue(fresh("mem"), conn);
    await fill(q, WAITING, groups);
    Bun.gc(true);
    found[`bytes per waiting job ${label}`] = (process.memoryUsage().rss - before) / WAITING;
    if (groups) {
      await q.drainAsync();
      found["groups left after drain"] = await q.getGroupsJobsCount();
    }
    await q.obliterateAsync();
    await q.close();
  }
  return found;
}

async function fairness(): Promise<Record<string, number>> {
  const name = fresh("fair");
  const q = new Queue(name, conn);
  for (let start = 0; start < HEAVY; start += 1000) {
    const count = Math.min(1000, HEAVY - start);
    await q.addBulk(Array.from({ length: count }, () => ({ name: "heavy", data: DATA, opts: { group: { id: "heavy" } } })));
  }
  const light = 100 * 10;
  const order: string[] = [];
  const waits: number[] = [];
  let finish = () => {};
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const w = new Worker(
    name,
    async (job: any) => {
      order.push(job.name);
      if (job.name !== "heavy") {
        waits.push(Date.now() - job.timestamp);
        if (waits.length === light) finish();
      }
      return null;
    },
    { ...conn, concurrency: 10 },
  );
  for (let g = 0; g < 100; g++) {
    const group = { id: `light-${g}` };
    await q.addBulk(Array.from({ length: 10 }, (_, i) => ({ name: `light-${g}-${i}`, data: {}, opts: { group } })));
  }
  const arrived = order.length;
  await finished;
  await w.close(true);
  const first = order.slice(arrived, arrived + 1000);
  await q.obliterateAsync();
  await q.close();
  waits.sort((a, b) => a - b);
  return {
    "light add-to-start p99 ms": waits[Math.floor(waits.length * 0.99) - 1],
    "light share of first 1000": first.filter((n) => n !== "heavy").length / Math.max(1, first.length),
  };
}

const row: Record<string, number | string> = {
  peer: "bunqueue",
  version: (await import("bunqueue/package.json")).version,
  ...(await addRates()),
};
for (const concurrency of [10, 100]) {
  row[`c${concurrency} plain`] = await processing(concurrency, 0);
  for (const groups of [10, 10000]) row[`c${concurrency} ${groups} groups`] = await processing(concurrency, groups);
}
if (!TCP) Object.assign(row, await memory());
Object.assign(row, await fairness());
console.log(JSON.stringify(row));
process.exit(0);
