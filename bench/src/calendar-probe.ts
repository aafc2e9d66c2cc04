/**
 * A probe of the calendar scheduler (capability 2), not the shared benchmark suite:
 *
 * 1. Tick cost: CPU milliseconds per simulated minute for one leader running 10,000 declarations on a
 *    ManualClock and the in-memory backend (no-op handlers), for two mixes: everything every minute
 *    (10,000 runs a minute) and a realistic spread of cron schedules. A run with no declarations gives
 *    the cost of the simulation itself.
 * 2. Failover: leader SIGKILLed → first occurrence admitted by the other replica, with the default
 *    settings (leadershipTTL 10 s, pollInterval 1 s), two processes on one SQLite file.
 *
 *   cd bench && node --import tsx --conditions=source src/calendar-probe.ts [--declarations 10000] [--minutes 30] [--failovers 3]
 *
 * Writes bench/results/calendar-probe.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os, { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import {
  calendar,
  createMemoryBackend,
  type Declaration,
  every,
  ManualClock,
  Registry,
  Scheduler,
} from '@duetime/core';

const args = process.argv.slice(2);
const option = (name: string, fallback: number): number => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const noop = () => {};
const ZONES = ['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'Australia/Sydney'];

/** Everything every minute: the worst case, 10,000 admissions and runs per simulated minute. */
function everyMinute(count: number): Declaration[] {
  return Array.from({ length: count }, (_, i) =>
    calendar(ZONES[i % ZONES.length] as string).everyMinute(`m${i}`, noop),
  );
}

/** A spread: 10% every minute, 20% every 5–15 min, 30% hourly at some minute, 40% daily at some time. */
function spread(count: number): Declaration[] {
  return Array.from({ length: count }, (_, i) => {
    const zone = calendar(ZONES[i % ZONES.length] as string);
    const slot = i % 10;
    if (slot === 0) return zone.everyMinute(`s${i}`, noop);
    if (slot <= 2) return zone.cron(`s${i}`, `*/${[5, 10, 15][i % 3]} * * * *`, noop);
    if (slot <= 5) return zone.cron(`s${i}`, `${i % 60} * * * *`, noop);
    return zone.dailyAt(
      `s${i}`,
      `${String(i % 24).padStart(2, '0')}:${String((i * 7) % 60).padStart(2, '0')}`,
      noop,
    );
  });
}

interface TickCost {
  mix: string;
  declarations: number;
  minutes: number;
  runs: number;
  cpuMsPerMinute: number;
  cpuMsPerMinuteNet: number;
}

async function simulate(
  declarations: Declaration[],
  minutes: number,
): Promise<{ cpuMs: number; runs: number }> {
  const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 30));
  const backend = createMemoryBackend({ clock });
  const scheduler = new Scheduler({
    registry: new Registry(...declarations),
    backend,
    clock,
    concurrency: 100_000,
    maxPerTick: 100_000,
  });
  const done = scheduler.run();
  await clock.advance(30_000); // elected; the first whole minute is due
  const runsBefore = scheduler.snapshot().counts.succeeded ?? 0;
  const before = process.cpuUsage();
  await clock.advance(minutes * 60_000);
  const used = process.cpuUsage(before);
  const runs = (scheduler.snapshot().counts.succeeded ?? 0) - runsBefore;
  await scheduler.stop();
  await done;
  return { cpuMs: (used.user + used.system) / 1000, runs };
}

async function tickCosts(count: number, minutes: number): Promise<TickCost[]> {
  const baseline = await simulate([], minutes);
  const results: TickCost[] = [];
  for (const [mix, build] of [
    ['every minute', everyMinute],
    ['spread', spread],
  ] as const) {
    const declarations = build(count);
    await simulate(declarations.slice(0, 100), 2); // warm up
    const { cpuMs, runs } = await simulate(declarations, minutes);
    results.push({
      mix,
      declarations: count,
      minutes,
      runs,
      cpuMsPerMinute: round(cpuMs / minutes),
      cpuMsPerMinuteNet: round((cpuMs - baseline.cpuMs) / minutes),
    });
    console.log(
      `tick cost, ${count} declarations (${mix}): ${round(cpuMs / minutes)} CPU ms per simulated minute ` +
        `(${round((cpuMs - baseline.cpuMs) / minutes)} net of the simulation itself), ${runs} runs in ${minutes} min`,
    );
  }
  return results;
}

const round = (n: number) => Math.round(n * 10) / 10;

/** Child mode: a replica with default settings on a SQLite file; prints LEADER and ADMIT lines. */
async function replica(file: string): Promise<void> {
  const backend = await createSqliteBackend({ filename: file });
  const scheduler = new Scheduler({
    registry: new Registry(
      every('probe', 1000, ({ invocation }) => {
        console.log(`ADMIT ${invocation.intendedAt.getTime()} ${Date.now()}`);
      }).with({ catchUp: { window: 60_000 } }),
    ),
    backend,
  });
  const stop = new AbortController();
  process.once('SIGTERM', () => stop.abort());
  const done = scheduler.run(stop.signal);
  console.log('READY');
  let leader = false;
  const watch = setInterval(() => {
    if (scheduler.snapshot().leader && !leader) {
      leader = true;
      console.log(`LEADER ${Date.now()}`);
    }
  }, 5);
  await done;
  clearInterval(watch);
  await backend.close();
}

function start(file: string) {
  const require = createRequire(import.meta.url);
  const child = spawn(
    process.execPath,
    [
      '--import',
      pathToFileURL(require.resolve('tsx')).href,
      '--conditions=source',
      fileURLToPath(import.meta.url),
      '--replica',
      file,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines: { text: string; at: number }[] = [];
  const waiters: { pattern: RegExp; resolve: (line: { text: string; at: number }) => void }[] = [];
  let buffer = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = { text: buffer.slice(0, i), at: Date.now() };
      buffer = buffer.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters])
        if (w.pattern.test(line.text)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
    }
  });
  return {
    child,
    next(pattern: RegExp, after = 0): Promise<{ text: string; at: number }> {
      const seen = lines.find((l) => l.at >= after && pattern.test(l.text));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve) => waiters.push({ pattern, resolve }));
    },
  };
}

async function failover(dir: string, round: number): Promise<number> {
  const file = join(dir, `failover-${round}.db`);
  const first = start(file);
  await first.next(/^LEADER /);
  const second = start(file);
  await second.next(/^READY$/);
  await first.next(/^ADMIT /, Date.now() + 1);
  await new Promise((resolve) => setTimeout(resolve, 300)); // between two occurrences
  first.child.kill('SIGKILL');
  const killedAt = Date.now();
  const admitted = await second.next(/^ADMIT /);
  const ms = admitted.at - killedAt;
  second.child.kill('SIGTERM');
  await new Promise((resolve) => second.child.once('exit', resolve));
  console.log(
    `failover ${round + 1}: leader SIGKILL → first occurrence admitted by the other replica in ${ms} ms`,
  );
  return ms;
}

async function main(): Promise<void> {
  if (args[0] === '--replica') return replica(args[1] as string);
  const count = option('declarations', 10_000);
  const minutes = option('minutes', 30);
  const failovers = option('failovers', 3);
  const ticks = await tickCosts(count, minutes);
  const dir = mkdtempSync(join(tmpdir(), 'duetime-calendar-probe-'));
  const takeovers: number[] = [];
  try {
    for (let i = 0; i < failovers; i++) takeovers.push(await failover(dir, i));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const sorted = [...takeovers].sort((a, b) => a - b);
  const median = sorted.length > 0 ? sorted[Math.floor(sorted.length / 2)] : null;
  console.log(
    `failover median ${median} ms over ${takeovers.length} (defaults: leadershipTTL 10,000 ms, pollInterval 1,000 ms)`,
  );
  const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'results', 'calendar-probe.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify(
      {
        when: new Date().toISOString(),
        machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
        tickCost: ticks,
        failover: { backend: 'sqlite', settings: 'defaults', ms: takeovers, medianMs: median },
      },
      null,
      2,
    )}\n`,
  );
}

await main();
