/**
 * A probe of the JetStream scheduler in @duetime/backend-nats (not the shared benchmark suite): timers
 * fired per second and fire lateness (consumer receive time minus due instant, p50/p99), in each mode the
 * servers allow: emulated on NATS 2.9 (the library's pump), native on NATS >= 2.12 (ADR-51), and emulated
 * forced on NATS >= 2.12 (same server, to compare).
 *
 *   cd bench && node --import tsx --conditions=source src/jetstream-scheduler-probe.ts [--timers N]
 *
 * Two workloads per mode, each on a fresh stream that is deleted afterwards:
 * - burst: N timers all due at the same instant; rate = N / (last receive - due instant).
 * - steady: N timers spread over 5 s (N/5 per second); lateness under a steady load.
 * Timers are read back through `consumeFired` (concurrency 64, a no-op handler), as an application would.
 * DUETIME_NATS_URL / DUETIME_NATS_NEW_URL override the servers.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { JetStreamScheduler, type JetStreamSchedulerOptions } from '@duetime/backend-nats';
import { fmt, percentile } from './lib/stats.js';

const { values } = parseArgs({ options: { timers: { type: 'string', default: '2000' } } });
const N = Number(values.timers);
const OLD_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
const NEW_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

interface Result {
  mode: string;
  workload: string;
  scheduledPerSec: number;
  firedPerSec: number;
  p50: number;
  p99: number;
  max: number;
}

async function run(
  url: string,
  label: string,
  options: JetStreamSchedulerOptions,
  workload: 'burst' | 'steady',
): Promise<Result> {
  const prefix = `probe${randomBytes(4).toString('hex')}`;
  const scheduler = await JetStreamScheduler.connect(url, { prefix, ...options });
  const info = await scheduler.ensureStream();
  if (info.mode === 'emulated')
    while (!scheduler.isPumpLeader) await new Promise((resolve) => setTimeout(resolve, 20));
  const lateness: number[] = [];
  let last = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const consumer = await scheduler.consumeFired(
    'probe',
    3,
    () => {},
    (_key, _payload, _id, fired) => {
      const now = Date.now();
      lateness.push(now - (fired.due?.getTime() ?? now));
      last = now;
      if (lateness.length === N) done();
    },
    { concurrency: 64 },
  );
  const lead = 3_000 + N; // time to publish them all before the first is due
  const base = Date.now() + lead;
  const dueOf = (i: number) => (workload === 'burst' ? base : base + Math.floor((i * 5_000) / N));
  const t0 = performance.now();
  for (let i = 0; i < N; i += 200) {
    await Promise.all(
      Array.from({ length: Math.min(200, N - i) }, (_, j) =>
        scheduler.at(`k/${(i + j) % 100}`, new Date(dueOf(i + j)), i + j),
      ),
    );
  }
  const scheduledPerSec = N / ((performance.now() - t0) / 1000);
  if (Date.now() > base)
    console.log(`  warning: scheduling took past the due instant (${label} ${workload})`);
  const timeout = setTimeout(done, lead + 60_000);
  await finished;
  clearTimeout(timeout);
  await consumer.stop();
  await scheduler.destroy();
  const span = workload === 'burst' ? last - base : last - dueOf(0);
  return {
    mode: `${label} (${info.serverVersion})`,
    workload,
    scheduledPerSec,
    firedPerSec: lateness.length / Math.max(0.001, span / 1000),
    p50: percentile(lateness, 50),
    p99: percentile(lateness, 99),
    max: Math.max(...lateness),
  };
}

/** Whether a server answers at `url`, and at least `minor` 2.x when given; prints why not. */
async function available(url: string, minor = 0): Promise<boolean> {
  try {
    const probe = await JetStreamScheduler.connect(url, { connectTimeoutMs: 2_000 });
    const version = probe.connection.info?.version ?? '0.0.0';
    await probe.close();
    if (Number(version.split('.')[1]) < minor) {
      console.log(`not run on ${url}: nats-server ${version} is older than 2.${minor}`);
      return false;
    }
    return true;
  } catch (error) {
    console.log(`not run on ${url}: ${(error as Error).message}`);
    return false;
  }
}

const hasOld = await available(OLD_URL);
const hasNew = await available(NEW_URL, 12);
const cases: Array<[boolean, string, string, JetStreamSchedulerOptions]> = [
  [hasOld, OLD_URL, 'emulated', {}],
  [hasNew, NEW_URL, 'native', {}],
  [hasNew, NEW_URL, 'emulated (forced)', { mode: 'emulated' }],
];
for (const [ok, url, label, options] of cases) {
  if (!ok) continue;
  for (const workload of ['burst', 'steady'] as const) {
    const r = await run(url, label, options, workload);
    console.log(
      `${r.mode.padEnd(28)} ${workload.padEnd(6)} scheduled/s ${fmt(r.scheduledPerSec).padStart(6)}  fired/s ${fmt(r.firedPerSec).padStart(6)}  lateness p50 ${fmt(r.p50)} ms  p99 ${fmt(r.p99)} ms  max ${fmt(r.max)} ms`,
    );
  }
}
console.log(`\n${N} timers per run; lateness = consumer receive time - due instant.`);
