import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { JetStreamSchedulerOptions } from '@duetime/backend-nats';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext, sleep } from '../lib/run.js';
import { percentile } from '../lib/stats.js';
import { NATS_NEW_URL, NATS_URL } from '../subjects/types.js';

interface Mode {
  name: string;
  url: string;
  options: JetStreamSchedulerOptions;
}

interface RunResult {
  scheduledPerSec: number;
  firedPerSec: number;
  p50: number;
  p99: number;
}

interface ModeResult {
  burst: RunResult;
  steady: RunResult;
}

const FAILED: RunResult = {
  scheduledPerSec: Number.NaN,
  firedPerSec: Number.NaN,
  p50: Number.NaN,
  p99: Number.NaN,
};

/**
 * One run on a fresh stream (deleted afterwards): `count` timers due at one instant (burst) or spread over
 * `spreadMs` (steady), read back through `consumeFired` (concurrency 64, no-op handler) as an application
 * would. Lateness = consumer receive time − due instant.
 */
async function run(
  mode: Mode,
  shape: 'burst' | 'steady',
  count: number,
  spreadMs: number,
  leadMs: number,
): Promise<RunResult> {
  const { JetStreamScheduler } = await import('@duetime/backend-nats');
  const prefix = `bench${randomBytes(4).toString('hex')}`;
  const scheduler = await JetStreamScheduler.connect(mode.url, { prefix, ...mode.options });
  try {
    const info = await scheduler.ensureStream();
    const deadline = Date.now() + 30_000;
    while (info.mode === 'emulated' && !scheduler.isPumpLeader) {
      if (Date.now() > deadline) throw new Error('the emulated pump did not start within 30 s');
      await sleep(20);
    }
    const lateness: number[] = [];
    let last = 0;
    const consumer = await scheduler.consumeFired(
      'bench',
      3,
      () => {},
      (_key, _payload, _id, fired) => {
        const now = Date.now();
        lateness.push(now - (fired.due?.getTime() ?? now));
        last = now;
      },
      { concurrency: 64 },
    );
    const base = Date.now() + leadMs;
    const dueOf = (i: number) => (shape === 'burst' ? base : base + Math.floor((i * spreadMs) / count));
    const t0 = performance.now();
    for (let i = 0; i < count; i += 200) {
      await Promise.all(
        Array.from({ length: Math.min(200, count - i) }, (_, j) =>
          scheduler.at(`k/${(i + j) % 100}`, new Date(dueOf(i + j)), i + j),
        ),
      );
    }
    const scheduledPerSec = count / ((performance.now() - t0) / 1000);
    if (Date.now() > base) throw new Error(`scheduling ${count} timers took past the first due instant`);
    const waitUntil = base + spreadMs + 60_000;
    while (lateness.length < count && Date.now() < waitUntil) await sleep(20);
    await consumer.stop();
    if (lateness.length < count) throw new Error(`only ${lateness.length} of ${count} timers fired`);
    const span = shape === 'burst' ? last - base : last - dueOf(0);
    return {
      scheduledPerSec: Math.round(scheduledPerSec),
      firedPerSec: Math.round(count / Math.max(0.001, span / 1000)),
      p50: percentile(lateness, 50),
      p99: percentile(lateness, 99),
    };
  } finally {
    await scheduler.destroy();
  }
}

/** The server's version at `url`, or why it cannot serve (no answer, or older than 2.`minor`). */
async function probeServer(url: string, minor: number): Promise<{ version?: string; reason?: string }> {
  const { JetStreamScheduler } = await import('@duetime/backend-nats');
  try {
    const scheduler = await JetStreamScheduler.connect(url, { connectTimeoutMs: 2000 });
    const version = scheduler.connection.info?.version ?? '0.0.0';
    await scheduler.close();
    const [major = 0, minorOf = 0] = version.split('.').map(Number);
    if (major < 2 || (major === 2 && minorOf < minor))
      return { reason: `nats-server ${version} at ${url} is older than 2.${minor}` };
    return { version };
  } catch (error) {
    // The services script records why it could not start the newer server; that is the reason to give.
    const status = join(
      process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'),
      'duetime',
      'nats-new.status',
    );
    let why = '';
    try {
      const line = readFileSync(status, 'utf8').trim();
      if (line.startsWith('unavailable')) why = ` (${line.replace(/^unavailable\s*/, '')})`;
    } catch {}
    const cause = /refused/i.test((error as Error).message) ? 'connection refused' : (error as Error).message;
    return { reason: `no NATS server answered at ${url}: ${cause}${why}` };
  }
}

/**
 * JetStream scheduler timers (`JetStreamScheduler` of @duetime/backend-nats): timers fired per second and
 * fire lateness, in native mode (NATS >= 2.12 message schedules, at DUETIME_NATS_NEW_URL), native mode
 * with `fireAheadMs: 500` (fired early, held by consumeFired until due), emulated mode (the library's
 * pump, on NATS 2.9 at DUETIME_NATS_URL) and emulated mode forced on the newer server.
 */
export async function timersWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 300 : 2000;
  const spreadMs = ctx.quick ? 2000 : 5000;
  // Time to publish them all before the first is due.
  const leadMs = (ctx.quick ? 1000 : 3000) + count;
  const old = await probeServer(NATS_URL, 0);
  const recent = await probeServer(NATS_NEW_URL, 12);
  const candidates = [
    { label: 'emulated', server: old, url: NATS_URL, options: {} },
    { label: 'native', server: recent, url: NATS_NEW_URL, options: {} },
    // Fired half a second early by the server, held by consumeFired until due.
    { label: 'native, fireAheadMs 500', server: recent, url: NATS_NEW_URL, options: { fireAheadMs: 500 } },
    { label: 'emulated, forced', server: recent, url: NATS_NEW_URL, options: { mode: 'emulated' as const } },
  ];
  const modes: Mode[] = [];
  const missing: { name: string; reason: string }[] = [];
  for (const c of candidates) {
    if (c.server.version)
      modes.push({ name: `${c.label} (NATS ${c.server.version})`, url: c.url, options: c.options });
    else missing.push({ name: c.label, reason: `not measured: ${c.server.reason}` });
  }
  const samples = await alternate(
    ctx,
    modes,
    'timers',
    async (mode): Promise<ModeResult> => ({
      burst: await run(mode, 'burst', count, spreadMs, leadMs),
      steady: await run(mode, 'steady', count, spreadMs, leadMs),
    }),
    { burst: FAILED, steady: FAILED },
  );
  const metrics: [string, 'burst' | 'steady', keyof RunResult, string, 'higher' | 'lower'][] = [
    [
      `burst: ${count.toLocaleString('en-US')} due at one instant, fired per second`,
      'burst',
      'firedPerSec',
      'timers/s',
      'higher',
    ],
    [
      `burst: ${count.toLocaleString('en-US')} due at one instant, lateness p50`,
      'burst',
      'p50',
      'ms',
      'lower',
    ],
    [
      `burst: ${count.toLocaleString('en-US')} due at one instant, lateness p99`,
      'burst',
      'p99',
      'ms',
      'lower',
    ],
    [
      `steady: ${count.toLocaleString('en-US')} over ${spreadMs / 1000} s, lateness p50`,
      'steady',
      'p50',
      'ms',
      'lower',
    ],
    [
      `steady: ${count.toLocaleString('en-US')} over ${spreadMs / 1000} s, lateness p99`,
      'steady',
      'p99',
      'ms',
      'lower',
    ],
    ['timers scheduled per second (200 in flight)', 'burst', 'scheduledPerSec', 'timers/s', 'higher'],
  ];
  const rows: Row[] = [];
  for (const [metric, shape, key, unit, better] of metrics) {
    for (const mode of modes)
      rows.push(
        soloRow(
          'timers',
          metric,
          unit,
          better,
          `JetStreamScheduler ${mode.name}`,
          samples.get(mode.name)!.map((r) => r[shape][key]),
        ),
      );
    for (const m of missing)
      rows.push(soloRow('timers', metric, unit, better, `JetStreamScheduler ${m.name}`, [], m.reason));
  }
  return rows;
}
