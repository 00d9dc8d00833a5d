// One workload of Node BullMQ for bench/studies/redis_costs.py, which reads the Redis server's
// counters around it: the setup (a filled queue) first, then "ready" on stdout; the measured
// part starts when a line arrives on stdin and ends with one JSON line (wall time and this
// process's CPU).
// Usage: REDIS_URL=... PEER_PACKAGE=bullmq6 node costs.mjs '{"row":"c100","jobs":20000}'
import { createInterface } from "node:readline";

const PACKAGE = process.env.PEER_PACKAGE ?? "bullmq";
const { Queue, Worker } = await import(PACKAGE);
const cfg = JSON.parse(process.argv[2] ?? "{}");
const ROW = cfg.row ?? "c100";
const JOBS = cfg.jobs ?? 20000;
const URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379/0";
const connection = { url: URL, maxRetriesPerRequest: null };
const name = `bullmq-costs-${ROW}-${process.pid}`;
const queue = new Queue(name, { connection });
await queue.waitUntilReady();

async function fill(n) {
  for (let i = 0; i < n; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) batch.push({ name: "x", data: { i: j } });
    await queue.addBulk(batch);
  }
}

async function run() {
  if (ROW === "add") {
    for (let i = 0; i < JOBS; i++) await queue.add("x", { i });
    return;
  }
  if (ROW === "add_bulk") return fill(JOBS);
  const concurrency = Number(ROW.slice(1));
  let done = 0;
  await new Promise((resolve) => {
    const w = new Worker(name, async () => null, { connection, concurrency });
    w.on("completed", () => {
      if (++done === JOBS) w.close().then(resolve);
    });
  });
}

if (ROW.startsWith("c")) await fill(JOBS);
// a first add warms the scripts up (loads them into the server) before the measured part
if (ROW === "add") await queue.add("warm", {});
console.log("ready");
const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once("line", resolve));
const cpu = process.cpuUsage();
const t = performance.now();
await run();
const wall = (performance.now() - t) / 1000;
const used = process.cpuUsage(cpu);
const version = (await import(`${PACKAGE}/package.json`, { with: { type: "json" } })).default
  .version;
console.log(JSON.stringify({ version, wall, user: used.user / 1e6, sys: used.system / 1e6 }));
await queue.obliterate({ force: true });
await queue.close();
process.exit(0);
