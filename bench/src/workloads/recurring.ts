import { type Row, rowsFor } from '../lib/report.js';
import { alternate, type BenchContext, inChild, sleep, together } from '../lib/run.js';
import { percentile } from '../lib/stats.js';
import { recurringSubjectByName } from '../subjects/index.js';
import type { RecurringItem, RecurringSubject } from '../subjects/types.js';

/** Cron expressions that each fire every minute, written in the different ways applications write them. */
export const EVERY_MINUTE = [
  '* * * * *',
  '*/1 * * * *',
  '0-59 * * * *',
  '* 0-23 * * *',
  '* * 1-31 * *',
  '* * * 1-12 *',
  '* * * * 0-6',
  '* * * * SUN-SAT',
] as const;

/**
 * Zones with whole-hour, half-hour and quarter-hour offsets, with and without daylight saving time. Every
 * offset is a whole number of minutes, so an every-minute expression fires on every UTC minute in each.
 */
export const ZONES = [
  'UTC',
  'Europe/Berlin',
  'America/New_York',
  'America/Sao_Paulo',
  'Asia/Kolkata',
  'Asia/Kathmandu',
  'Australia/Adelaide',
  'Pacific/Chatham',
] as const;

/** `count` schedules spread evenly over every pair of expression and zone. */
export function recurringItems(count: number): RecurringItem[] {
  return Array.from({ length: count }, (_, i) => ({
    key: `r${i}`,
    cron: EVERY_MINUTE[i % EVERY_MINUTE.length]!,
    zone: ZONES[Math.floor(i / EVERY_MINUTE.length) % ZONES.length]!,
  }));
}

/** One handler start: the schedule's key, the occurrence's instant, and when the handler started (ms). */
export interface Delivery {
  key: string;
  instant?: number;
  startedAt: number;
}

export interface RecurringResult {
  /** Occurrence deliveries started in the window, per second of the window (whatever their instant). */
  perSecond: number;
  /** Lateness (handler start − occurrence instant) of those deliveries, in ms. */
  p50: number;
  p99: number;
  /** Of the occurrences due in the window (schedules × minutes), the share delivered in it, in %. */
  deliveredPercent: number;
  /** Seconds it took to create the schedules (reported in the log only). */
  setupSeconds?: number;
}

const FAILED: RecurringResult = {
  perSecond: Number.NaN,
  p50: Number.NaN,
  p99: Number.NaN,
  deliveredPercent: Number.NaN,
};

/**
 * What the deliveries say about the window [from, to). Each occurrence (key and instant) counts once, at
 * its first handler start. Throughput and lateness are those of the occurrences whose delivery started in
 * the window, whatever their instant (a subject that is behind delivers older ones); the share delivered
 * is of the `due` occurrences whose instant lies in the window, delivered before it closed.
 */
export function summarizeDeliveries(
  deliveries: Delivery[],
  from: number,
  to: number,
  due: number,
): RecurringResult {
  const first = new Map<string, Delivery>();
  for (const d of deliveries) {
    if (d.instant === undefined) continue;
    const id = `${d.key}@${d.instant}`;
    const seen = first.get(id);
    if (seen === undefined || d.startedAt < seen.startedAt) first.set(id, d);
  }
  const lateness: number[] = [];
  let dueDelivered = 0;
  for (const d of first.values()) {
    if (d.startedAt >= to) continue;
    if (d.startedAt >= from) lateness.push(d.startedAt - d.instant!);
    if (d.instant! >= from) dueDelivered++;
  }
  return {
    perSecond: Math.round(lateness.length / ((to - from) / 1000)),
    p50: lateness.length > 0 ? percentile(lateness, 50) : Number.NaN,
    p99: lateness.length > 0 ? percentile(lateness, 99) : Number.NaN,
    deliveredPercent: Math.round((dueDelivered / due) * 1000) / 10,
  };
}

/** The first whole UTC minute at or after `t`. */
export function nextMinute(t: number): number {
  return Math.ceil(t / 60_000) * 60_000;
}

/**
 * In a fresh process: a worker (concurrency 16) started, `schedules` recurring schedules created (each
 * every minute), then the deliveries of the `minutes` whole minutes from `startAt` (default: the first
 * whole minute at least 5 s after the schedules exist), counted as {@link summarizeDeliveries} says.
 * Occurrences before `startAt` run too (the system is warm when the window opens) but are not counted.
 */
export async function recurringChild(args: Record<string, unknown>): Promise<RecurringResult> {
  const subject = recurringSubjectByName(String(args.subject));
  const schedules = Number(args.schedules);
  const minutes = Number(args.minutes);
  const queue = await subject.create();
  try {
    const deliveries: Delivery[] = [];
    const stop = await queue.startWorker({
      concurrency: 16,
      onOccurrence: (key, instant) => deliveries.push({ key, instant, startedAt: Date.now() }),
    });
    const setupStarted = performance.now();
    await queue.schedule(recurringItems(schedules));
    const setupSeconds = Math.round((performance.now() - setupStarted) / 100) / 10;
    const from = args.startAt === undefined ? nextMinute(Date.now() + 5000) : Number(args.startAt);
    if (Date.now() > from - 1000)
      throw new Error(
        `creating ${schedules} schedules took ${setupSeconds} s, past the window's first occurrence`,
      );
    const to = from + minutes * 60_000;
    await sleep(to - Date.now());
    await stop();
    await queue.resolveInstants?.(deliveries);
    return { ...summarizeDeliveries(deliveries, from, to, schedules * minutes), setupSeconds };
  } finally {
    await queue.close();
  }
}

/** The workload's rows from its samples (per subject, one result per round). */
export function recurringRows(
  schedules: number,
  minutes: number,
  subjects: RecurringSubject[],
  samples: Map<string, RecurringResult[]>,
): Row[] {
  const rate = Math.round(schedules / 60).toLocaleString('en-US');
  const label = `${schedules.toLocaleString('en-US')} schedules every minute for ${minutes} minutes (${rate} occurrences/s due)`;
  const pick = (key: keyof RecurringResult) =>
    new Map([...samples].map(([name, values]) => [name, values.map((v) => v[key] ?? Number.NaN)]));
  return [
    ...rowsFor(
      'recurring',
      `${label}, occurrences/s delivered`,
      'items/s',
      'higher',
      subjects,
      pick('perSecond'),
    ),
    ...rowsFor('recurring', `${label}, lateness p50`, 'ms', 'lower', subjects, pick('p50')),
    ...rowsFor('recurring', `${label}, lateness p99`, 'ms', 'lower', subjects, pick('p99')),
    ...rowsFor(
      'recurring',
      `${label}, due occurrences delivered within the window`,
      '%',
      'higher',
      subjects,
      pick('deliveredPercent'),
    ),
  ];
}

/**
 * recurring: many recurring schedules, each firing every minute (a spread of zones and expressions), one
 * worker (concurrency 16) in a process of its own per subject → occurrences/s delivered, lateness p50/p99
 * (handler start − occurrence instant) and the share of due occurrences delivered. Full runs take turns
 * (each subject's window is minutes long); quick runs put every subject in the same window at once.
 */
export async function recurringWorkload(ctx: BenchContext, subjects: RecurringSubject[]): Promise<Row[]> {
  const schedules = ctx.quick ? 2000 : 100_000;
  const minutes = ctx.quick ? 2 : 5;
  const args = (subject: RecurringSubject, startAt?: number) => ({
    subject: subject.name,
    schedules,
    minutes,
    ...(startAt === undefined ? {} : { startAt }),
  });
  let samples: Map<string, RecurringResult[]>;
  if (ctx.quick) {
    // One window for every subject: the first whole minute at least 30 s away (time to start them all).
    const windows = new Map<number, number>();
    samples = await together(
      ctx,
      subjects,
      'recurring',
      (subject, round) => {
        if (!windows.has(round)) windows.set(round, nextMinute(Date.now() + 30_000));
        return inChild<RecurringResult>('recurring', args(subject, windows.get(round)));
      },
      FAILED,
    );
  } else {
    samples = await alternate(
      ctx,
      subjects,
      'recurring',
      (subject) => inChild<RecurringResult>('recurring', args(subject)),
      FAILED,
    );
  }
  return recurringRows(schedules, minutes, subjects, samples);
}
