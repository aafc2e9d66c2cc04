/**
 * Measurements that need a process of their own (CPU and RSS of one library alone):
 * `node lib/child.ts <task> <json-args>`; prints one JSON line with the result.
 */
import { subjectByName } from '../subjects/index.js';
import type { Item } from '../subjects/types.js';
import { replicaChild } from '../workloads/failover.js';
import { scaleChild } from '../workloads/scale.js';

const [task, raw] = process.argv.slice(2);
const args = JSON.parse(raw ?? '{}') as Record<string, unknown>;

async function idle(): Promise<unknown> {
  const subject = subjectByName(String(args.subject));
  const count = Number(args.count);
  const idleMs = Number(args.idleMs);
  const queue = await subject.create();
  try {
    const run = Math.random().toString(36).slice(2, 8);
    const dueAt = Date.now() + 3_600_000;
    const items: Item[] = Array.from({ length: count }, (_, i) => ({ id: `${run}-${i}`, dueAt: dueAt + i }));
    for (let i = 0; i < items.length; i += 1000) await queue.enqueueBatch(items.slice(i, i + 1000));
    const stop = await queue.startWorker({ concurrency: 16, onJob: () => {} });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    globalThis.gc?.();
    const before = process.cpuUsage();
    await new Promise((resolve) => setTimeout(resolve, idleMs));
    const used = process.cpuUsage(before);
    const rssMb = Math.round((process.memoryUsage().rss / 1048576) * 10) / 10;
    await stop();
    return { cpuSeconds: Math.round(((used.user + used.system) / 1e6) * 1000) / 1000, rssMb };
  } finally {
    await queue.close();
  }
}

const tasks: Record<string, () => Promise<unknown>> = {
  idle,
  scale: () => scaleChild(args),
  replica: () => replicaChild(args),
};
const fn = tasks[task ?? ''];
if (!fn) {
  console.error(`unknown task ${task}`);
  process.exit(2);
}
console.log(JSON.stringify(await fn()));
process.exit(0);
