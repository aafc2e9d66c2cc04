import { afterEach, describe, expect, it } from 'vitest';
import { cron, every, Reason, State } from '../../src/index.js';
import { iso, outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const SECOND = 1000;
const MINUTE = 60_000;
const cursorKey = (id: string) => `duetime/calendar/production/default/cursor/${id}`;

describe('Scheduler: first start (no cursor)', () => {
  it('runs no occurrence that was due before it started, whatever grace is', async () => {
    // Before: with the default grace of 30 s, every('beat', 1000) ran 30 handlers at once at start-up.
    world = new World(T0 + 12_345);
    const ran: string[] = [];
    const { scheduler } = world.replica(
      [
        every(
          'beat',
          SECOND,
          ({ invocation }) => void ran.push(`${iso(invocation.intendedAt)} ${invocation.origin}`),
        ),
      ],
      { grace: 30_000 },
    );
    await world.advance(0);
    expect(scheduler.snapshot().leader).toBe(true);
    expect(ran).toEqual([]);
    expect(records(scheduler)).toEqual([]);
    await world.advance(SECOND);
    expect(ran).toEqual([`${iso(T0 + 13_000)} scheduled`]);
    await world.advance(2 * SECOND);
    expect(ran).toEqual([
      `${iso(T0 + 13_000)} scheduled`,
      `${iso(T0 + 14_000)} scheduled`,
      `${iso(T0 + 15_000)} scheduled`,
    ]);
    // The cursor began just before the start: a leader taking over would catch up from there.
    expect(await world.backend.cursors.read(cursorKey('beat'))).toEqual(new Date(T0 + 15_000));
  });

  it('starts a withoutOverlap cron schedule at its next occurrence instead of racing a backlog', async () => {
    // Before: `*/2 * * * * *` with withoutOverlap admitted 15 occurrences at once; one ran, the others
    // were skipped as overlap_busy, in no particular order.
    world = new World(T0 + 29_500);
    const ran: number[] = [];
    const { scheduler } = world.replica(
      [
        cron(
          'even',
          '*/2 * * * * *',
          'UTC',
          ({ invocation }) => void ran.push(invocation.intendedAt.getTime()),
        ).with({
          withoutOverlap: true,
        }),
      ],
      { grace: 30_000 },
    );
    await world.advance(0);
    expect(ran).toEqual([]);
    await world.advance(6 * SECOND);
    expect(ran).toEqual([T0 + 30_000, T0 + 32_000, T0 + 34_000]);
    expect(outcomes(records(scheduler, 'even'))).toEqual(['succeeded', 'succeeded', 'succeeded']);
  });

  it('runs an occurrence due at the very instant it started', async () => {
    world = new World(T0);
    const ran: number[] = [];
    world.replica([every('job', MINUTE, ({ invocation }) => void ran.push(invocation.intendedAt.getTime()))]);
    await world.advance(0);
    expect(ran).toEqual([T0]);
  });

  it('does not replay the last grace period on a restart without a CursorBackend', async () => {
    world = new World(T0 + 5 * SECOND);
    const ran: number[] = [];
    const job = every('job', 10 * SECOND, ({ invocation }) => void ran.push(invocation.intendedAt.getTime()));
    const first = world.replica([job], { cursors: undefined, grace: 30_000 });
    await world.advance(30 * SECOND); // T0+10 s, T0+20 s, T0+30 s
    await first.scheduler.stop();
    const before = [T0 + 10 * SECOND, T0 + 20 * SECOND, T0 + 30 * SECOND];
    expect(ran).toEqual(before);
    // Cursors lived in memory only: the next process has none, and must not run them again.
    await world.advance(2 * SECOND);
    world.replica([job], { cursors: undefined, grace: 30_000 });
    await world.advance(0);
    expect(ran).toEqual(before);
    await world.advance(3 * SECOND);
    expect(ran).toEqual([...before, T0 + 40 * SECOND]);
  });

  it('with catchUp, neither runs nor reports what was due before it started', async () => {
    world = new World();
    await world.advance(3 * 3_600_000 + 20_000); // T0 + 3 h - 10 s
    const ran: number[] = [];
    const { scheduler } = world.replica(
      [
        every('fresh', MINUTE, ({ invocation }) => void ran.push(invocation.intendedAt.getTime())).with({
          catchUp: { window: 5 * MINUTE, max: 2 },
        }),
      ],
      { grace: MINUTE },
    );
    await world.advance(0);
    // T0 + 2 h 59 min (50 s ago) is within grace but was due before the start: it does not run.
    expect(ran).toEqual([]);
    expect(records(scheduler, 'fresh')).toEqual([]);
    await world.advance(10_000);
    expect(ran).toEqual([T0 + 3 * 3_600_000]);
    expect(outcomes(records(scheduler, 'fresh'))).toEqual(['succeeded']);
  });

  it('with catchUp.onFirstStart, runs the most recent `max` within the window as catch-up, and reports nothing older', async () => {
    world = new World(T0 + 30 * MINUTE + 20_000);
    const ran: string[] = [];
    const { scheduler } = world.replica(
      [
        every('report', 5 * MINUTE, ({ invocation }) => {
          ran.push(`${iso(invocation.intendedAt)} ${invocation.origin}`);
        }).with({ catchUp: { window: 20 * MINUTE, max: 3, onFirstStart: true } }),
      ],
      { grace: 30_000 },
    );
    await world.advance(0);
    // In the window (T0+10:20, T0+30:20]: 15, 20, 25 and 30 min; the 3 most recent run, oldest first; T0+30
    // is within grace, so on time.
    expect(ran).toEqual([
      `${iso(T0 + 20 * MINUTE)} catch_up`,
      `${iso(T0 + 25 * MINUTE)} catch_up`,
      `${iso(T0 + 30 * MINUTE)} scheduled`,
    ]);
    const list = records(scheduler, 'report');
    expect(outcomes(list)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(list.some((r) => r.reason === Reason.Missed || r.reason === Reason.BacklogLimited)).toBe(false);
    expect(await world.backend.cursors.read(cursorKey('report'))).toEqual(new Date(T0 + 30 * MINUTE));
    await world.advance(5 * MINUTE);
    expect(ran.at(-1)).toBe(`${iso(T0 + 35 * MINUTE)} scheduled`);
  });

  it('persists where a catch-up first start began before running anything, so a crash re-examines it', async () => {
    world = new World(T0 + 30 * MINUTE + 20_000);
    const ran: string[] = [];
    const job = every('report', 5 * MINUTE, ({ invocation }) => {
      ran.push(`${iso(invocation.intendedAt)} ${invocation.origin}`);
      return new Promise(() => {}); // never finishes: as if the process died while running
    }).with({ catchUp: { window: 20 * MINUTE, max: 2, onFirstStart: true } });
    const a = world.replica([job], { grace: 30_000 });
    await world.advance(0);
    expect(ran).toEqual([`${iso(T0 + 25 * MINUTE)} catch_up`, `${iso(T0 + 30 * MINUTE)} scheduled`]);
    expect(await world.backend.cursors.read(cursorKey('report'))).toEqual(new Date(T0 + 20 * MINUTE));
    a.leases.fail('renew');
    a.leases.fail('acquire');
    const b = world.replica([job], { grace: 30_000 });
    await world.advance(4000);
    expect(b.scheduler.snapshot().leader).toBe(true);
    // b has a cursor, so it is no first start: it runs both again from where a began (T0+30 min is still
    // within grace).
    expect(ran.slice(2)).toEqual([`${iso(T0 + 25 * MINUTE)} catch_up`, `${iso(T0 + 30 * MINUTE)} scheduled`]);
    expect(records(b.scheduler, 'report').every((r) => r.state === State.Running)).toBe(true);
  });
});
