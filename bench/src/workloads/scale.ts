import { Dispatcher } from '@duetime/core';
import { type Row, soloRow } from '../lib/report.js';
import { type BenchContext, inChild, rssMb, sleep } from '../lib/run.js';
import { median } from '../lib/stats.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';

/**
 * Per backend, enqueueing stops after this many minutes even short of the target count (the rows then say
 * how far it got): 15, or DUETIME_BENCH_SCALE_BUDGET_MINUTES.
 */
const BUDGET_MINUTES = Number(process.env.DUETIME_BENCH_SCALE_BUDGET_MINUTES ?? 15);

interface ScaleChildResult {
  /** RSS of a dispatcher over an empty store, in the same process before the large one. */
  emptyRssMb: number;
  rssMb: number;
  dueLookupMs: number;
  nextDueMs: number;
  /** `store.dueBacklog()` (what a status page polls: the due count up to 10,000 and the oldest due time). */
  backlogMs: number;
  /** How many of each lookup were timed (50, fewer where one takes seconds: see {@link LOOKUP_BUDGET_MS}). */
  lookups: number;
}

/** The lookups are timed 50 times each, or for this long in all when each takes seconds (a scan). */
const LOOKUP_BUDGET_MS = 60_000;

async function dispatcherRss(kind: DuetimeBackendName, namespace: string | undefined, settleMs: number) {
  const opened = await openDuetime(kind, namespace);
  const dispatcher = new Dispatcher({
    store: opened.backend.store,
    concurrency: 16,
    processor: async () => {},
  });
  const controller = new AbortController();
  const done = dispatcher.run(controller.signal);
  await sleep(settleMs);
  globalThis.gc?.();
  const rss = rssMb();
  return {
    opened,
    rss,
    async stop() {
      controller.abort();
      await done;
    },
  };
}

/**
 * In a fresh process: a dispatcher over an empty store, then one over the backlog (RSS of each), and the
 * cost of the backlog's due lookups (nothing is due yet), next-deadline lookups and due-backlog lookups.
 */
export async function scaleChild(args: Record<string, unknown>): Promise<ScaleChildResult> {
  const kind = args.backend as DuetimeBackendName;
  const settleMs = Number(args.settleMs);
  const empty = await dispatcherRss(kind, undefined, settleMs);
  await empty.stop();
  await empty.opened.backend.close();
  await empty.opened.drop();
  const full = await dispatcherRss(kind, String(args.namespace), settleMs);
  const { store } = full.opened.backend;
  const due: number[] = [];
  const next: number[] = [];
  const backlog: number[] = [];
  const started = performance.now();
  for (let i = 0; i < 50 && performance.now() - started < LOOKUP_BUDGET_MS; i++) {
    let t = performance.now();
    await store.pageSchedules({ order: 'due', through: new Date(), limit: 64 });
    due.push(performance.now() - t);
    t = performance.now();
    await store.nextDueAt();
    next.push(performance.now() - t);
    t = performance.now();
    await store.dueBacklog();
    backlog.push(performance.now() - t);
  }
  await full.stop();
  await full.opened.backend.close();
  return {
    emptyRssMb: empty.rss,
    rssMb: full.rss,
    dueLookupMs: median(due),
    nextDueMs: median(next),
    backlogMs: median(backlog),
    lookups: due.length,
  };
}

/**
 * 5. scale: a large backlog of pending items → enqueue rate and time, dispatcher RSS (and its growth over an
 * empty store), due-lookup time, per backend. One round: the backlog is the measurement.
 */
export async function scaleWorkload(ctx: BenchContext, backends: DuetimeBackendName[]): Promise<Row[]> {
  const target = ctx.quick ? 3000 : 1_000_000;
  const rows: Row[] = [];
  for (const kind of backends) {
    const { backend, namespace, drop } = await openDuetime(kind);
    try {
      const started = performance.now();
      const base = Date.now() + 3_600_000;
      // One NATS transaction is one atomic batch of at most 1,000 messages: a record and a timer per
      // schedule and one commit marker (packages/backend-nats/README.md, Limits): 499 per transaction.
      const perTransaction = kind === 'nats' ? 499 : 1000;
      let count = 0;
      while (count < target && performance.now() - started < BUDGET_MINUTES * 60_000) {
        const end = Math.min(target, count + perTransaction);
        await backend.store.transact(async (tx) => {
          for (let j = count; j < end; j++) {
            await tx.schedule(`scale/${j}`, new Date(base + j), {
              type: 'bench',
              aggregateId: `a${j}`,
              data: { pad: 'x'.repeat(64) },
            });
          }
        });
        count = end;
        if (count % 100_000 === 0) ctx.log(`  scale ${kind}: ${count.toLocaleString('en-US')} enqueued`);
      }
      const seconds = (performance.now() - started) / 1000;
      const enqueueRate = Math.round(count / seconds);
      await backend.close();
      const child = await inChild<ScaleChildResult>('scale', {
        backend: kind,
        namespace,
        settleMs: ctx.quick ? 1000 : 3000,
      });
      ctx.log(
        `  scale ${kind}: ${count} in ${seconds.toFixed(1)} s, ${enqueueRate} items/s, ${JSON.stringify(child)}`,
      );
      const subject = `duetime/${kind}`;
      const notes = [
        perTransaction !== 1000 ? `${perTransaction} per transaction` : undefined,
        count < target
          ? `stopped at ${count.toLocaleString('en-US')} pending: the ${BUDGET_MINUTES}-minute enqueue budget ran out`
          : undefined,
      ].filter((part) => part !== undefined);
      const note = notes.length > 0 ? notes.join('; ') : undefined;
      const label = `${target.toLocaleString('en-US')} pending`;
      rows.push(
        soloRow(
          'scale',
          `${label}, enqueue rate (1,000 per transaction)`,
          'items/s',
          'higher',
          subject,
          [enqueueRate],
          note,
        ),
        soloRow(
          'scale',
          `${label}, enqueue time`,
          's',
          'lower',
          subject,
          [Math.round(seconds * 10) / 10],
          note,
        ),
        soloRow('scale', `${label}, dispatcher RSS`, 'MB', 'lower', subject, [child.rssMb], note),
        soloRow(
          'scale',
          `${label}, dispatcher RSS above an empty store's`,
          'MB',
          'lower',
          subject,
          [Math.round((child.rssMb - child.emptyRssMb) * 10) / 10],
          note,
        ),
        soloRow(
          'scale',
          `${label}, due lookup (limit 64, none due yet)`,
          'ms',
          'lower',
          subject,
          [child.dueLookupMs],
          note,
        ),
        soloRow('scale', `${label}, next deadline lookup`, 'ms', 'lower', subject, [child.nextDueMs], note),
        soloRow(
          'scale',
          `${label}, due backlog (dueBacklog: due count and oldest due, none due yet)`,
          'ms',
          'lower',
          subject,
          [child.backlogMs],
          note,
        ),
      );
    } finally {
      await drop();
    }
  }
  return rows;
}
