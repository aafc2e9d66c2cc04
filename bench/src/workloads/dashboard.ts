import { startDashboard } from '@duetime/dashboard';
import { type Row, soloRow } from '../lib/report.js';
import { type BenchContext, inChild, rssMb, sleep } from '../lib/run.js';
import { median, percentile } from '../lib/stats.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';
import { uniqueName } from '../subjects/types.js';

const KINDS: DuetimeBackendName[] = ['sqlite', 'postgres'];
const DATA_BYTES = 10 * 1024;
const HOUR = 3_600_000;

interface DashboardChildResult {
  idleRssMb: number;
  rssMb: number;
  p50Ms: number;
  p99Ms: number;
}

/**
 * In a fresh process, on the filled store: the dashboard's handler answering `api/overview` (what every
 * open tab polls every 5 s), 40 times; its latency, and RSS before (store open, handler made) and after.
 */
export async function dashboardChild(args: Record<string, unknown>): Promise<DashboardChildResult> {
  const opened = await openDuetime(args.backend as DuetimeBackendName, String(args.namespace));
  try {
    const dashboard = await startDashboard({ backend: opened.backend, port: 0 });
    try {
      await sleep(500);
      const idleRssMb = rssMb();
      const times: number[] = [];
      for (let i = 0; i < 40; i++) {
        const started = performance.now();
        const response = await fetch(new URL('api/overview', dashboard.url));
        await response.json();
        times.push(performance.now() - started);
        if (!response.ok) throw new Error(`api/overview answered ${response.status}`);
      }
      return { idleRssMb, rssMb: rssMb(), p50Ms: median(times), p99Ms: percentile(times, 99) };
    } finally {
      await dashboard.close();
    }
  } finally {
    await opened.backend.close();
  }
}

/**
 * dashboard: `api/overview` of the status page over a store of 100,000 pending schedules carrying 10 KB of
 * data each, on SQLite and PostgreSQL: latency p50/p99 and the dashboard process's RSS above its idle.
 */
export async function dashboardWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 5_000 : 100_000;
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
      await opened.backend.close();
      // One fill, then a fresh process per round measuring it.
      const children: DashboardChildResult[] = [];
      for (let round = 0; round < ctx.rounds; round++) {
        const child = await inChild<DashboardChildResult>('dashboard', { backend: kind, namespace });
        ctx.log(`  dashboard ${kind} round ${round + 1}/${ctx.rounds}: ${JSON.stringify(child)}`);
        children.push(child);
      }
      const label = `${count.toLocaleString('en-US')} pending × 10 KB, api/overview`;
      const subject = `duetime/${kind}`;
      rows.push(
        soloRow(
          'dashboard',
          `${label} p50`,
          'ms',
          'lower',
          subject,
          children.map((c) => c.p50Ms),
        ),
      );
      rows.push(
        soloRow(
          'dashboard',
          `${label} p99`,
          'ms',
          'lower',
          subject,
          children.map((c) => c.p99Ms),
        ),
      );
      rows.push(
        soloRow(
          'dashboard',
          `${label}, RSS above idle after 40 answers`,
          'MB',
          'lower',
          subject,
          children.map((c) => Math.round((c.rssMb - c.idleRssMb) * 10) / 10),
        ),
      );
    } finally {
      await opened.drop();
    }
  }
  return rows;
}
