import {
  calendar,
  createMemoryBackend,
  type Declaration,
  ManualClock,
  Registry,
  Scheduler,
} from '@duetime/core';
import { type Row, soloRow } from '../lib/report.js';
import { type BenchContext, inChild } from '../lib/run.js';

const noop = () => {};
const ZONES = ['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'Australia/Sydney'];

/** The declaration mixes, each over five zones. */
const MIXES: Record<string, (count: number) => Declaration[]> = {
  /** No declarations: the cost of the simulation itself (fake clock timers, the leadership heartbeat). */
  'no declarations': () => [],
  /** Everything every minute: the worst case, one admission and run per declaration per minute. */
  'every minute': (count) =>
    Array.from({ length: count }, (_, i) => calendar(ZONES[i % ZONES.length]!).everyMinute(`m${i}`, noop)),
  /** 10% every minute, 20% every 5–15 min, 30% hourly at some minute, 40% daily at some time. */
  spread: (count) =>
    Array.from({ length: count }, (_, i) => {
      const zone = calendar(ZONES[i % ZONES.length]!);
      const slot = i % 10;
      if (slot === 0) return zone.everyMinute(`s${i}`, noop);
      if (slot <= 2) return zone.cron(`s${i}`, `*/${[5, 10, 15][i % 3]} * * * *`, noop);
      if (slot <= 5) return zone.cron(`s${i}`, `${i % 60} * * * *`, noop);
      const at = `${String(i % 24).padStart(2, '0')}:${String((i * 7) % 60).padStart(2, '0')}`;
      return zone.dailyAt(`s${i}`, at, noop);
    }),
};

async function simulate(
  declarations: Declaration[],
  minutes: number,
): Promise<{ cpuMs: number; runs: number }> {
  const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 30));
  const scheduler = new Scheduler({
    registry: new Registry(...declarations),
    backend: createMemoryBackend({ clock }),
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

export interface TickResult {
  cpuMsPerMinute: number;
  runsPerMinute: number;
}

/** In a fresh process: one leader over `declarations` of each mix in turn, for `minutes` simulated minutes. */
export async function tickChild(args: Record<string, unknown>): Promise<Record<string, TickResult>> {
  const minutes = Number(args.minutes);
  const out: Record<string, TickResult> = {};
  for (const [mix, build] of Object.entries(MIXES)) {
    const declarations = build(Number(args.declarations));
    await simulate(declarations.slice(0, 100), 2); // warm-up
    const { cpuMs, runs } = await simulate(declarations, minutes);
    out[mix] = {
      cpuMsPerMinute: Math.round((cpuMs / minutes) * 10) / 10,
      runsPerMinute: Math.round(runs / minutes),
    };
  }
  return out;
}

/**
 * Calendar tick cost: CPU ms per simulated minute of one Scheduler leader with 10,000 declarations, on a
 * ManualClock and the in-memory backend (no-op handlers, concurrency and maxPerTick out of the way), so
 * what is measured is the scheduler's own work: admissions, runs, records, cursors. One process per round.
 */
export async function tickWorkload(ctx: BenchContext): Promise<Row[]> {
  const declarations = 10_000;
  const minutes = ctx.quick ? 3 : 30;
  const samples = new Map<string, TickResult[]>(Object.keys(MIXES).map((mix) => [mix, []]));
  for (let round = 0; round < ctx.rounds; round++) {
    let result: Record<string, TickResult> = {};
    try {
      result = await inChild<Record<string, TickResult>>('tick', { declarations, minutes });
    } catch (error) {
      ctx.log(`  tick round ${round + 1}/${ctx.rounds}: FAILED ${(error as Error).message}`);
    }
    for (const [mix, values] of samples)
      values.push(result[mix] ?? { cpuMsPerMinute: Number.NaN, runsPerMinute: Number.NaN });
    ctx.log(`  tick round ${round + 1}/${ctx.rounds}: ${JSON.stringify(result)}`);
  }
  return [...samples].map(([mix, values]) => {
    const runs = values.find((v) => Number.isFinite(v.runsPerMinute))?.runsPerMinute ?? Number.NaN;
    return soloRow(
      'tick',
      `CPU per simulated minute, ${declarations.toLocaleString('en-US')} declarations, ${minutes} simulated minutes`,
      'ms',
      'lower',
      `duetime Scheduler, ${mix === 'no declarations' ? 'no declarations (the simulation itself)' : `${mix} (${runs.toLocaleString('en-US')} runs a minute)`}`,
      values.map((v) => v.cpuMsPerMinute),
    );
  });
}
