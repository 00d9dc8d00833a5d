// bunqueue's single add alone, for bench/studies/single_pairs.py: the loop of bench.ts's addOne
// (`await q.add("x", { i })`, one after the other) against the TCP server on cfg.port, after
// 200 warm-up adds. Prints adds per second. Usage: bun single.ts '{"port": P, "single": N}'
import { Queue } from "bunqueue/client";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const SINGLE: number = cfg.single ?? 5000;
const q = new Queue(`single-${process.pid}`, { connection: { host: "127.0.0.1", port: cfg.port } });
for (let i = 0; i < 200; i++) await q.add("x", { i });
const started = performance.now();
for (let i = 0; i < SINGLE; i++) await q.add("x", { i });
console.log(SINGLE / ((performance.now() - started) / 1000));
process.exit(0);
