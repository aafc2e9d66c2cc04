/**
 * cron next(): nanoseconds per call for duetime, croner and cron-parser, side by side in one process.
 *
 * Each library steps through consecutive occurrences from the same start (its result is the next call's
 * input), restarting at the start when the walk reaches the end of the range, so the DST case keeps
 * crossing transitions. Every library is warmed up first, then timed in rounds of about the same length,
 * round-robin; the median round's CPU time per call is reported (with the best round and wall time).
 *
 * Run by `pnpm bench --only cron`, or alone: cd bench && npx tsx --conditions=source src/cron-next.ts
 * [--rounds 15] [--round-ms 60] [--out file]. Writes bench/results/cron-next.json unless --out says otherwise.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCron } from '@duetime/core';
import { CronExpressionParser } from 'cron-parser';
import { Cron } from 'croner';

interface Case {
  name: string;
  expression: string;
  zone: string;
  from: string;
  to: string;
}

const CASES: Case[] = [
  {
    name: 'simple',
    expression: '*/5 * * * *',
    zone: 'UTC',
    from: '2026-01-01T00:00:00Z',
    to: '2027-01-01T00:00:00Z',
  },
  {
    name: 'dst-crossing',
    expression: '30 2 * * *',
    zone: 'America/New_York',
    from: '2026-01-01T00:00:00Z',
    to: '2036-01-01T00:00:00Z',
  },
];

/** One library's stepper: returns the epoch ms of the next occurrence after the previous one. */
type Stepper = () => number;

function duetimeStepper(c: Case): Stepper {
  const spec = parseCron(c.expression, c.zone);
  const start = new Date(c.from);
  const end = Date.parse(c.to);
  let at = start;
  return () => {
    const next = spec.next(at) as Date;
    at = next.getTime() >= end ? start : next;
    return next.getTime();
  };
}

function cronerStepper(c: Case): Stepper {
  const job = new Cron(c.expression, { timezone: c.zone, paused: true });
  const start = new Date(c.from);
  const end = Date.parse(c.to);
  let at = start;
  return () => {
    const next = job.nextRun(at) as Date;
    at = next.getTime() >= end ? start : next;
    return next.getTime();
  };
}

/** croner's fastest setup for UTC: a fixed offset instead of a zone (it skips Intl entirely). */
function cronerUtcOffsetStepper(c: Case): Stepper {
  const job = new Cron(c.expression, { utcOffset: 0, paused: true });
  const start = new Date(c.from);
  const end = Date.parse(c.to);
  let at = start;
  return () => {
    const next = job.nextRun(at) as Date;
    at = next.getTime() >= end ? start : next;
    return next.getTime();
  };
}

function cronParserStepper(c: Case): Stepper {
  const start = new Date(c.from);
  const end = Date.parse(c.to);
  // The iterator keeps its position, which is this library's fastest way to step.
  const iterator = CronExpressionParser.parse(c.expression, { currentDate: start, tz: c.zone });
  return () => {
    const next = iterator.next().getTime();
    if (next >= end) iterator.reset(start);
    return next;
  };
}

const LIBRARIES: Array<{ name: string; make: (c: Case) => Stepper; only?: (c: Case) => boolean }> = [
  { name: 'duetime', make: duetimeStepper },
  { name: 'croner', make: cronerStepper },
  { name: 'croner (utcOffset: 0)', make: cronerUtcOffsetStepper, only: (c) => c.zone === 'UTC' },
  { name: 'cron-parser', make: cronParserStepper },
];

function argument(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const value = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`);
  return value;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

interface Result {
  case: string;
  expression: string;
  zone: string;
  library: string;
  /** Median over rounds of CPU time per call (user + system), in nanoseconds. */
  nsPerCall: number;
  /** Best round's CPU time per call. */
  bestNsPerCall: number;
  /** Median over rounds of wall-clock time per call. */
  wallNsPerCall: number;
  callsPerRound: number;
  rounds: number;
  /** CPU time per call in each round, in nanoseconds (rounds alternate between libraries). */
  roundsNsPerCall: number[];
}

interface Timing {
  cpu: number[];
  wall: number[];
}

const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1000; // ns
};

/**
 * Times every stepper round-robin (one round of each, then the next round), so that load from elsewhere on
 * the machine hits all libraries alike. Rounds are sized to about `roundMs` per library from a calibration
 * during warm-up. CPU time is reported as well as wall time: on a shared machine it is the steadier of the
 * two, since time spent waiting for a core is not counted.
 */
function measure(steppers: Stepper[], rounds: number, roundMs: number): Array<Timing & { calls: number }> {
  let sink = 0;
  const calls = steppers.map((step) => {
    // Warm-up: long enough for the JIT to settle and for every library to fill its caches.
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < 400) {
      for (let i = 0; i < 100; i++) sink += step();
      n += 100;
    }
    const msPerCall = (performance.now() - t0) / n;
    return Math.max(100, Math.round(roundMs / msPerCall));
  });
  const timings: Timing[] = steppers.map(() => ({ cpu: [], wall: [] }));
  for (let r = 0; r < rounds; r++) {
    steppers.forEach((step, s) => {
      const n = calls[s] as number;
      const cpu0 = cpuNow();
      const wall0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) sink += step();
      const wall = Number(process.hrtime.bigint() - wall0);
      const cpu = cpuNow() - cpu0;
      timings[s]?.cpu.push(cpu / n);
      timings[s]?.wall.push(wall / n);
    });
  }
  if (sink === 42) console.log('');
  return timings.map((t, i) => ({ ...t, calls: calls[i] as number }));
}

function main(): void {
  const rounds = argument('rounds', 15);
  const roundMs = argument('round-ms', 60);
  const results: Result[] = [];
  for (const c of CASES) {
    const libraries = LIBRARIES.filter((library) => library.only === undefined || library.only(c));
    const timings = measure(
      libraries.map((library) => library.make(c)),
      rounds,
      roundMs,
    );
    libraries.forEach((library, i) => {
      const t = timings[i] as Timing & { calls: number };
      results.push({
        case: c.name,
        expression: c.expression,
        zone: c.zone,
        library: library.name,
        nsPerCall: Math.round(median(t.cpu)),
        bestNsPerCall: Math.round(Math.min(...t.cpu)),
        wallNsPerCall: Math.round(median(t.wall)),
        callsPerRound: t.calls,
        rounds,
        roundsNsPerCall: t.cpu.map((ns) => Math.round(ns)),
      });
    });
  }
  const rows = results.map((r) => {
    const own = results.find((o) => o.case === r.case && o.library === 'duetime') as Result;
    return {
      case: r.case,
      expression: `${r.expression} (${r.zone})`,
      library: r.library,
      'ns/call': r.nsPerCall,
      'best ns/call': r.bestNsPerCall,
      'wall ns/call': r.wallNsPerCall,
      'vs duetime': r.library === 'duetime' ? '1.0x' : `${(r.nsPerCall / own.nsPerCall).toFixed(1)}x slower`,
    };
  });
  console.table(rows);
  const outAt = process.argv.indexOf('--out');
  const out =
    outAt >= 0
      ? String(process.argv[outAt + 1])
      : join(dirname(fileURLToPath(import.meta.url)), '..', 'results', 'cron-next.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify(
      {
        benchmark: 'cron-next',
        date: new Date().toISOString(),
        node: process.version,
        cpu: os.cpus()[0]?.model ?? 'unknown',
        cores: os.cpus().length,
        loadAverage: os.loadavg().map((l) => Math.round(l * 100) / 100),
        results,
      },
      null,
      2,
    )}\n`,
  );
  console.log(`written ${out}`);
}

main();
