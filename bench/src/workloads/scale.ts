import { Dispatcher } from '@duetime/core';
import type { Row } from '../lib/report.js';
import { type BenchContext, inChild } from '../lib/run.js';
import { median, summarize } from '../lib/stats.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';

const BACKENDS: DuetimeBackendName[] = ['sqlite', 'postgres', 'redis', 'nats'];

interface ScaleChildResult {
  rssMb: number;
  dueLookupMs: number;
  nextDueMs: number;
}

/** In a fresh process: a dispatcher over the backlog (RSS), and the cost of its due lookups. */
export async function scaleChild(args: Record<string, unknown>): Promise<ScaleChildResult> {
  const { backend } = await openDuetime(args.backend as DuetimeBackendName, String(args.namespace));
  const dispatcher = new Dispatcher({ store: backend.store, concurrency: 16, processor: async () => {} });
  const controller = new AbortController();
  const done = dispatcher.run(controller.signal);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  globalThis.gc?.();
  const rssMb = Math.round((process.memoryUsage().rss / 1048576) * 10) / 10;
  const due: number[] = [];
  const next: number[] = [];
  for (let i = 0; i < 50; i++) {
    let t = performance.now();
    await backend.store.driver.dueSchedules(new Date(), 64);
    due.push(performance.now() - t);
    t = performance.now();
    await backend.store.driver.nextDueAt();
    next.push(performance.now() - t);
  }
  controller.abort();
  await done;
  await backend.close();
  return { rssMb, dueLookupMs: median(due), nextDueMs: median(next) };
}

/** 5. scale: a large backlog of pending items → enqueue rate, dispatcher RSS, due-lookup time, per backend. */
export async function scaleWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 20_000 : 1_000_000;
  const rows: Row[] = [];
  for (const kind of BACKENDS) {
    const { backend, namespace, drop } = await openDuetime(kind);
    try {
      const started = performance.now();
      const base = Date.now() + 3_600_000;
      for (let i = 0; i < count; i += 1000) {
        await backend.store.transact(async (tx) => {
          for (let j = i; j < Math.min(count, i + 1000); j++) {
            await tx.schedule(`scale/${j}`, new Date(base + j), {
              type: 'bench',
              aggregateId: `a${j}`,
              data: { pad: 'x'.repeat(64) },
            });
          }
        });
        if (i % 100_000 === 0 && i > 0) ctx.log(`  scale ${kind}: ${i.toLocaleString('en-US')} enqueued`);
      }
      const enqueueRate = Math.round((count / (performance.now() - started)) * 1000);
      await backend.close();
      const child = await inChild<ScaleChildResult>('scale', { backend: kind, namespace });
      ctx.log(`  scale ${kind}: ${enqueueRate} items/s, ${JSON.stringify(child)}`);
      const subject = `duetime/${kind}`;
      const label = `${count.toLocaleString('en-US')} pending`;
      rows.push(
        {
          workload: 'scale',
          metric: `${label}, enqueue (1,000 per transaction)`,
          unit: 'items/s',
          better: 'higher',
          subject,
          summary: summarize([enqueueRate]),
        },
        {
          workload: 'scale',
          metric: `${label}, dispatcher RSS`,
          unit: 'MB',
          better: 'lower',
          subject,
          summary: summarize([child.rssMb]),
        },
        {
          workload: 'scale',
          metric: `${label}, due lookup (64 due)`,
          unit: 'ms',
          better: 'lower',
          subject,
          summary: summarize([child.dueLookupMs]),
        },
        {
          workload: 'scale',
          metric: `${label}, next deadline lookup`,
          unit: 'ms',
          better: 'lower',
          subject,
          summary: summarize([child.nextDueMs]),
        },
      );
    } finally {
      await drop();
    }
  }
  return rows;
}
