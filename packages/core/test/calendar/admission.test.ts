import { describe, expect, it } from 'vitest';
import {
  between,
  days,
  firstStartCursor,
  interval,
  lastDayOfMonth,
  parseCron,
  planAdmission,
  timeline,
  unlessBetween,
  type Window,
} from '../../src/index.js';

const MINUTE = 60_000;
const at = (text: string) => Date.parse(text);

/** Every instant of `spec` in [from, to) that passes `windows`, checked one by one (the slow truth). */
function bruteForce(
  spec: ReturnType<typeof interval>,
  windows: Window[],
  zone: string,
  from: number,
  to: number,
): number[] {
  const out: number[] = [];
  for (let t = spec.nextMs(from - 1); !Number.isNaN(t) && t < to; t = spec.nextMs(t))
    if (windows.every((w) => w.allows(new Date(t), zone))) out.push(t);
  return out;
}

describe('timeline with calendar windows', () => {
  it('finds the same occurrences as a one-by-one check, jumping over rejected days and hours', () => {
    const spec = parseCron('*/10 * * * *', 'Europe/Berlin');
    const windows = [days('SAT', 'SUN'), between('22:00', '02:00')];
    const tl = timeline(spec, windows);
    const from = at('2026-03-20T00:00:00Z');
    const to = at('2026-04-06T00:00:00Z'); // across the spring DST change
    const found: number[] = [];
    for (let t = tl.nextMs(from - 1); !Number.isNaN(t) && t < to; t = tl.nextMs(t)) found.push(t);
    const truth: number[] = [];
    for (let t = spec.nextMs(from - 1); !Number.isNaN(t) && t < to; t = spec.nextMs(t))
      if (windows.every((w) => w.allows(new Date(t), 'Europe/Berlin'))) truth.push(t);
    expect(found.length).toBeGreaterThan(50);
    expect(found).toEqual(truth);
  });

  it('stays cheap for a dense interval restricted to the last day of the month, and agrees with a brute force', () => {
    const spec = interval(1000);
    const tl = timeline(spec, [lastDayOfMonth, unlessBetween('00:00:05', '23:59:50')]);
    const first = tl.nextMs(at('2026-02-01T00:00:00Z'));
    expect(new Date(first).toISOString()).toBe('2026-02-28T00:00:00.000Z');
    const day = bruteForce(
      spec,
      [lastDayOfMonth, unlessBetween('00:00:05', '23:59:50')],
      'UTC',
      first,
      first + 86_400_000,
    );
    const found: number[] = [];
    for (let t = first; !Number.isNaN(t) && t < first + 86_400_000; t = tl.nextMs(t)) found.push(t);
    expect(found).toEqual(day);
    expect(new Date(tl.nextMs(found.at(-1) as number)).toISOString()).toBe('2026-03-31T00:00:00.000Z');
  });

  it('gives up (no next occurrence) instead of searching forever when windows never allow anything', () => {
    const tl = timeline(parseCron('0 12 * * *', 'UTC'), [between('00:00', '01:00')]);
    expect(Number.isNaN(tl.nextMs(at('2026-01-01T00:00:00Z')))).toBe(true);
  });
});

describe('planAdmission', () => {
  const tl = timeline(interval(MINUTE), []);
  const now = at('2026-03-02T10:00:30Z');

  it('runs what is within grace on time and folds older ones into one missed record', () => {
    const plan = planAdmission({
      timeline: tl,
      decidedThrough: now - 30 * MINUTE,
      now,
      grace: 2 * MINUTE,
      limit: 100,
    });
    expect(plan.run.map((c) => [new Date(c.at).toISOString(), c.origin])).toEqual([
      ['2026-03-02T09:59:00.000Z', 'scheduled'],
      ['2026-03-02T10:00:00.000Z', 'scheduled'],
    ]);
    expect(plan.missed).toEqual({ latest: at('2026-03-02T09:58:00Z'), count: 28, capped: false });
    expect(plan.through).toBe(now);
  });

  it('keeps the most recent `max` within the catch-up window and folds the rest of the window', () => {
    const plan = planAdmission({
      timeline: tl,
      decidedThrough: now - 60 * MINUTE,
      now,
      grace: 1000,
      catchUp: { window: 10 * MINUTE, max: 4 },
      limit: 100,
    });
    expect(plan.run.map((c) => new Date(c.at).toISOString().slice(11, 16))).toEqual([
      '09:57',
      '09:58',
      '09:59',
      '10:00',
    ]);
    expect(plan.run.every((c) => c.origin === 'catch_up')).toBe(true);
    expect(plan.backlog).toEqual({ latest: at('2026-03-02T09:56:00Z'), count: 6, capped: false });
    expect(plan.missed?.count).toBe(50);
  });

  it('stops at the limit and says how far it decided, so the rest waits for the next tick', () => {
    const plan = planAdmission({
      timeline: tl,
      decidedThrough: now - 10 * MINUTE,
      now,
      grace: 20 * MINUTE,
      limit: 3,
    });
    expect(plan.run).toHaveLength(3);
    expect(plan.through).toBe(plan.run[2]?.at);
    const rest = planAdmission({
      timeline: tl,
      decidedThrough: plan.through,
      now,
      grace: 20 * MINUTE,
      limit: 100,
    });
    expect(rest.run).toHaveLength(7);
    expect(rest.run[0]?.at).toBe((plan.through as number) + MINUTE);
  });

  it('decides nothing again at or before what was decided, even when time reads earlier', () => {
    const plan = planAdmission({
      timeline: tl,
      decidedThrough: now + MINUTE,
      now,
      grace: 2 * MINUTE,
      limit: 100,
    });
    expect(plan).toEqual({ run: [], through: now + MINUTE });
  });

  it('caps counting of a huge gap and still names the latest missed occurrence', () => {
    const dense = timeline(interval(1), []);
    const plan = planAdmission({
      timeline: dense,
      decidedThrough: now - 3_600_000,
      now,
      grace: 10,
      limit: 100,
    });
    expect(plan.missed?.capped).toBe(true);
    expect(plan.missed?.latest).toBe(now - 10);
    expect(plan.run).toHaveLength(10);
  });
});

describe('firstStartCursor', () => {
  const tl = timeline(interval(MINUTE), []);
  const now = at('2026-03-02T10:00:30Z');

  it('begins just before the start, or just before grace when the start is older', () => {
    const startedAt = at('2026-03-02T09:59:10Z');
    expect(firstStartCursor({ timeline: tl, startedAt, now, grace: 5 * MINUTE })).toBe(
      at('2026-03-02T09:59:00Z'),
    );
    // Started at a whole minute: that occurrence is due at the start, not before it, so it is left to run.
    expect(
      firstStartCursor({ timeline: tl, startedAt: at('2026-03-02T10:00:00Z'), now, grace: 5 * MINUTE }),
    ).toBe(at('2026-03-02T09:59:00Z'));
    // A start long ago (leadership came late): only grace counts.
    const early = at('2026-03-02T08:00:00Z');
    expect(firstStartCursor({ timeline: tl, startedAt: early, now, grace: 2 * MINUTE })).toBe(
      at('2026-03-02T09:58:00Z'),
    );
    // catchUp without onFirstStart changes nothing.
    const catchUp = { window: 30 * MINUTE, max: 5 };
    expect(firstStartCursor({ timeline: tl, startedAt, now, grace: 5 * MINUTE, catchUp })).toBe(
      at('2026-03-02T09:59:00Z'),
    );
  });

  it('with onFirstStart begins before the most recent `max` within the window, or the window when fewer', () => {
    const startedAt = now;
    const catchUp = { window: 30 * MINUTE, max: 5, onFirstStart: true };
    expect(firstStartCursor({ timeline: tl, startedAt, now, grace: 1000, catchUp })).toBe(
      at('2026-03-02T09:55:00Z'),
    );
    const wide = { ...catchUp, max: 100 };
    expect(firstStartCursor({ timeline: tl, startedAt, now, grace: 1000, catchUp: wide })).toBe(
      at('2026-03-02T09:30:00Z'),
    );
    // planAdmission from there runs exactly those, with no backlog or missed record.
    const plan = planAdmission({
      timeline: tl,
      decidedThrough: firstStartCursor({ timeline: tl, startedAt, now, grace: 1000, catchUp }),
      now,
      grace: 1000,
      catchUp,
      limit: 100,
    });
    expect(plan.run.map((c) => new Date(c.at).toISOString().slice(11, 16))).toEqual([
      '09:56',
      '09:57',
      '09:58',
      '09:59',
      '10:00',
    ]);
    expect(plan.backlog).toBeUndefined();
    expect(plan.missed).toBeUndefined();
  });

  it('falls back to the instant before the bound when the spec has no earlier occurrence', () => {
    const never = { nextMs: () => Number.NaN, prevMs: () => Number.NaN };
    expect(firstStartCursor({ timeline: never, startedAt: now, now, grace: 1000 })).toBe(now - 1);
  });
});
