import { Dispatcher, silentLogger, UnrecoverableError } from '@duetime/core';
import { startDashboard } from '@duetime/dashboard';
import { type Row, soloRow } from '../lib/report.js';
import { type BenchContext, inChild, rssMb, sleep } from '../lib/run.js';
import { median, percentile } from '../lib/stats.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';
import { uniqueName } from '../subjects/types.js';

const KINDS: DuetimeBackendName[] = ['sqlite', 'postgres'];
const DATA_BYTES = 10 * 1024;
const HOUR = 3_600_000;
/** Answers per read in one measuring process. */
const ANSWERS = 40;
/** The reads of an open tab: the totals it polls, and a page of each table (25 rows, as the page asks). */
const READS = {
  overview: 'api/overview',
  schedules: 'api/schedules?limit=25',
  'dead-letters': 'api/dead-letters?limit=25',
} as const;
type Read = keyof typeof READS;

interface ReadResult {
  p50Ms: number;
  p99Ms: number;
  /** Median size of an answer, in KB. */
  answerKb: number;
}

interface DashboardChildResult {
  /**
   * `api/overview`'s first answer in the fresh process (code loaded, statements prepared on the way), once
   * a request outside the API warmed up the HTTP client and server without touching the store.
   */
  firstOverviewMs: number;
  /** RSS once each read has answered once (the warm-up), before the measured answers. */
  idleRssMb: number;
  rssMb: number;
  /** The highest RSS seen after any answer. */
  peakRssMb: number;
  reads: Record<Read, ReadResult>;
}

/**
 * In a fresh process, on the filled store: the dashboard's handler answering, 40 times each and in turn,
 * `api/overview` (what every open tab polls every 5 s), a page of `api/schedules` and a page of
 * `api/dead-letters`, each table paged forward through its `next` cursor (back to the first page at its
 * end); their latency, and RSS before (after one warm-up answer of each read: the code each read loads,
 * the HTTP client's included, is in the idle figure), at its highest after an answer, and after.
 */
export async function dashboardChild(args: Record<string, unknown>): Promise<DashboardChildResult> {
  const opened = await openDuetime(args.backend as DuetimeBackendName, String(args.namespace));
  try {
    const dashboard = await startDashboard({ backend: opened.backend, port: 0 });
    try {
      await sleep(500);
      const answer = async (path: string) => {
        const response = await fetch(new URL(path, dashboard.url));
        const text = await response.text();
        if (!response.ok) throw new Error(`${path} answered ${response.status}: ${text.slice(0, 200)}`);
        return text;
      };
      // The first fetch of a process loads its HTTP client (some 30 ms here): not the dashboard's cost.
      const warm = await fetch(new URL('not-a-page', dashboard.url));
      await warm.text();
      if (warm.status !== 404) throw new Error(`a path outside the API answered ${warm.status}`);
      const cold = performance.now();
      await answer(READS.overview);
      const firstOverviewMs = performance.now() - cold;
      await answer(READS.schedules);
      await answer(READS['dead-letters']);
      await sleep(500);
      const idleRssMb = rssMb();
      let peakRssMb = idleRssMb;
      const times: Record<Read, number[]> = { overview: [], schedules: [], 'dead-letters': [] };
      const sizes: Record<Read, number[]> = { overview: [], schedules: [], 'dead-letters': [] };
      const cursors: Partial<Record<Read, string>> = {};
      for (let i = 0; i < ANSWERS; i++) {
        for (const read of Object.keys(READS) as Read[]) {
          const after = cursors[read];
          const path = after ? `${READS[read]}&after=${encodeURIComponent(after)}` : READS[read];
          const started = performance.now();
          const text = await answer(path);
          times[read].push(performance.now() - started);
          sizes[read].push(Buffer.byteLength(text) / 1024);
          const next = (JSON.parse(text) as { next?: string }).next;
          if (read !== 'overview') cursors[read] = next;
          peakRssMb = Math.max(peakRssMb, rssMb());
        }
      }
      const reads = Object.fromEntries(
        (Object.keys(READS) as Read[]).map((read) => [
          read,
          {
            p50Ms: median(times[read]),
            p99Ms: percentile(times[read], 99),
            answerKb: Math.round(median(sizes[read]) * 10) / 10,
          },
        ]),
      ) as Record<Read, ReadResult>;
      return { firstOverviewMs, idleRssMb, rssMb: rssMb(), peakRssMb, reads };
    } finally {
      await dashboard.close();
    }
  } finally {
    await opened.backend.close();
  }
}

/**
 * dashboard: the status page over a store of 100,000 pending schedules and 10,000 dead letters carrying
 * 10 KB of data each, on SQLite and PostgreSQL: latency p50/p99 of `api/overview` and of a page of each
 * table, and the dashboard process's RSS above its idle.
 */
export async function dashboardWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 5_000 : 100_000;
  const dead = ctx.quick ? 500 : 10_000;
  const data = 'x'.repeat(DATA_BYTES);
  const rows: Row[] = [];
  for (const kind of KINDS) {
    const namespace = uniqueName('dash');
    const opened = await openDuetime(kind, namespace);
    try {
      const base = Date.now() + HOUR;
      for (let start = 0; start < count; start += 1000) {
        await opened.backend.store.transact(async (tx) => {
          for (let i = start; i < Math.min(count, start + 1000); i++)
            await tx.schedule(`dash/${i}`, new Date(base + i), { type: 'dash', data });
        });
      }
      // Dead letters the way they are made: due messages whose processor refuses them for good.
      for (let start = 0; start < dead; start += 1000) {
        await opened.backend.store.transact(async (tx) => {
          for (let i = start; i < Math.min(dead, start + 1000); i++)
            await tx.schedule(`gone/${i}`, new Date(Date.now() - 1000), { type: 'gone', data });
        });
      }
      const dispatcher = new Dispatcher({
        store: opened.backend.store,
        logger: silentLogger,
        telemetry: false,
        processor: async () => {
          throw new UnrecoverableError('refused');
        },
      });
      const ac = new AbortController();
      const running = dispatcher.run(ac.signal);
      const deadline = Date.now() + 600_000;
      while ((await opened.backend.store.countDeadLetters({ limit: dead })) < dead) {
        if (Date.now() > deadline)
          throw new Error(`${kind}: the dead letters were not all made in 10 minutes`);
        await sleep(200);
      }
      ac.abort();
      await running;
      await opened.backend.close();
      // One fill, then a fresh process per round measuring it.
      const children: DashboardChildResult[] = [];
      for (let round = 0; round < ctx.rounds; round++) {
        const child = await inChild<DashboardChildResult>('dashboard', { backend: kind, namespace });
        ctx.log(`  dashboard ${kind} round ${round + 1}/${ctx.rounds}: ${JSON.stringify(child)}`);
        children.push(child);
      }
      const store = `${count.toLocaleString('en-US')} pending × 10 KB`;
      const subject = `duetime/${kind}`;
      const deadLabel = `${dead.toLocaleString('en-US')} dead letters × 10 KB`;
      const labels: Record<Read, string> = {
        overview: `${store}, api/overview`,
        schedules: `${store}, api/schedules page of 25`,
        'dead-letters': `${deadLabel}, api/dead-letters page of 25`,
      };
      rows.push(
        soloRow(
          'dashboard',
          `${labels.overview}, first answer of a fresh process`,
          'ms',
          'lower',
          subject,
          children.map((c) => c.firstOverviewMs),
        ),
      );
      for (const read of Object.keys(READS) as Read[]) {
        for (const [stat, name] of [
          ['p50Ms', 'p50'],
          ['p99Ms', 'p99'],
        ] as const)
          rows.push(
            soloRow(
              'dashboard',
              `${labels[read]} ${name}`,
              'ms',
              'lower',
              subject,
              children.map((c) => c.reads[read][stat]),
            ),
          );
        if (read !== 'overview')
          rows.push(
            soloRow(
              'dashboard',
              `${labels[read]}, answer size`,
              'KB',
              'lower',
              subject,
              children.map((c) => c.reads[read].answerKb),
            ),
          );
      }
      const all = `${store} and ${deadLabel}`;
      rows.push(
        soloRow(
          'dashboard',
          `${all}, RSS above idle after ${ANSWERS} answers of each read`,
          'MB',
          'lower',
          subject,
          children.map((c) => Math.round((c.rssMb - c.idleRssMb) * 10) / 10),
        ),
      );
      rows.push(
        soloRow(
          'dashboard',
          `${all}, highest RSS above idle after an answer`,
          'MB',
          'lower',
          subject,
          children.map((c) => Math.round((c.peakRssMb - c.idleRssMb) * 10) / 10),
        ),
      );
    } finally {
      await opened.drop();
    }
  }
  return rows;
}
