import { afterEach, describe, expect, it } from 'vitest';
import { every, Reason, State } from '../../src/index.js';
import { iso, outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;

/** Runs a replica until T0 + 2 min (three occurrences done), stops it, and leaves 10 minutes of downtime. */
async function downtime(): Promise<number[]> {
  world = new World();
  const ran: number[] = [];
  const first = world.replica([
    every('job', MINUTE, ({ invocation }) => void ran.push(invocation.intendedAt.getTime())),
  ]);
  await world.advance(30_000 + 2 * MINUTE);
  await first.scheduler.stop();
  expect(ran).toEqual([T0, T0 + MINUTE, T0 + 2 * MINUTE]);
  await world.advance(10 * MINUTE); // now T0 + 12 min: occurrences T0+3 … T0+12 were not run
  return ran;
}

describe('Scheduler: missed occurrences and catch-up', () => {
  it('by default records the occurrences older than grace as one missed record and runs those within grace', async () => {
    await downtime();
    const ran: number[] = [];
    const { scheduler } = world.replica(
      [every('job', MINUTE, ({ invocation }) => void ran.push(invocation.intendedAt.getTime()))],
      { grace: 90_000 },
    );
    await world.advance(0);
    // Now T0+12min; grace 90 s covers T0+11 and T0+12 (both still on time); T0+3 … T0+10 (8) are missed.
    expect(ran).toEqual([T0 + 11 * MINUTE, T0 + 12 * MINUTE]);
    const list = records(scheduler, 'job');
    expect(outcomes(list)).toEqual(['skipped/missed', 'succeeded', 'succeeded']);
    expect(list[0]).toMatchObject({ count: 8, intendedAt: new Date(T0 + 10 * MINUTE), state: State.Skipped });
    expect(list[1]?.origin).toBe('scheduled');
    expect(list[2]?.origin).toBe('scheduled');
    expect(scheduler.snapshot().schedules[0]?.cursor?.getTime()).toBe(T0 + 12 * MINUTE);
  });

  it('with catchUp runs the most recent `max` inside the window oldest first, and folds the rest', async () => {
    await downtime();
    const ran: string[] = [];
    const { scheduler } = world.replica(
      [
        every(
          'job',
          MINUTE,
          ({ invocation }) => void ran.push(`${iso(invocation.intendedAt)} ${invocation.origin}`),
        ).with({
          catchUp: { window: 6 * MINUTE, max: 3 },
        }),
      ],
      { grace: 5000 },
    );
    await world.advance(0);
    // Window (T0+6, T0+12]: T0+7 … T0+12 (6); the 3 most recent run (T0+12 is on time, the others are
    // caught up); T0+7 … T0+9 are backlog-limited; T0+3 … T0+6 (4) are older than the window: missed.
    expect(ran).toEqual([
      `${iso(T0 + 10 * MINUTE)} catch_up`,
      `${iso(T0 + 11 * MINUTE)} catch_up`,
      `${iso(T0 + 12 * MINUTE)} scheduled`,
    ]);
    const list = records(scheduler, 'job');
    expect(outcomes(list)).toEqual([
      'skipped/missed',
      'skipped/backlog_limited',
      'succeeded',
      'succeeded',
      'succeeded',
    ]);
    expect(list[0]).toMatchObject({ reason: Reason.Missed, count: 4, intendedAt: new Date(T0 + 6 * MINUTE) });
    expect(list[1]).toMatchObject({
      reason: Reason.BacklogLimited,
      count: 3,
      intendedAt: new Date(T0 + 9 * MINUTE),
    });
    await world.advance(MINUTE);
    expect(ran.at(-1)).toBe(`${iso(T0 + 13 * MINUTE)} scheduled`);
  });

  it('never re-admits an occurrence after the clock jumps back, and reports the jump once', async () => {
    world = new World();
    const ran: number[] = [];
    const { scheduler } = world.replica([
      every('job', MINUTE, ({ invocation }) => void ran.push(invocation.intendedAt.getTime())),
    ]);
    await world.advance(30_000 + 5 * MINUTE); // T0+5.5 min
    expect(ran).toHaveLength(6);
    world.clock.set(world.clock.now() - 3_600_000);
    // Real timers measure durations and fire whatever the wall clock says; a manual clock's timers are
    // absolute, so nudge the scheduler as a real timer would.
    scheduler.wake();
    await world.advance(30 * MINUTE);
    expect(ran).toHaveLength(6);
    const incidents = records(scheduler, '*');
    expect(outcomes(incidents)).toEqual(['skipped/clock_failed']);
    expect(incidents[0]?.detail).toMatch(/ran backwards/);
    await world.advance(35 * MINUTE); // the clock is past its old reading again
    expect(ran.slice(6, 8)).toEqual([T0 + 6 * MINUTE, T0 + 7 * MINUTE]);
    expect(new Set(ran).size).toBe(ran.length);
  });

  it('records a spec that throws as clock_failed and keeps the other schedules running', async () => {
    world = new World();
    let ran = 0;
    const broken = every('broken', MINUTE, () => {});
    const spec = broken.spec as unknown as { nextMs: (ms: number) => number };
    const original = spec.nextMs;
    let calls = 0;
    // A spec that fails after its first answer (as a buggy custom spec would).
    const { define } = await import('../../src/index.js');
    const flaky = define(
      'flaky',
      {
        ...broken.spec,
        timeZone: 'UTC',
        next: (after: Date) => {
          calls++;
          if (calls > 1) throw new Error('spec bug');
          return new Date(original.call(spec, after.getTime()));
        },
        prev: (before: Date) => broken.spec.prev(before),
        occurrences: (from: Date, to: Date) => broken.spec.occurrences(from, to),
        describe: () => broken.spec.describe(),
        toString: () => 'flaky',
      },
      () => {},
    );
    const { scheduler } = world.replica([flaky, every('ok', MINUTE, () => void ran++)]);
    await world.advance(30_000 + 3 * MINUTE);
    expect(ran).toBe(4);
    expect(outcomes(records(scheduler, 'flaky'))).toContain('skipped/clock_failed');
  });
});
