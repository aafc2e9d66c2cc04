import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import {
  calendar,
  currentInvocation,
  DuetimeError,
  every,
  type Invocation,
  occurrenceId,
  Reason,
  Registry,
  Scheduler,
  State,
} from '../../src/index.js';
import { deferred, iso, outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

describe('Scheduler: running on time', () => {
  it('elects one leader and runs each occurrence once, with a stable occurrence id and the invocation in context', async () => {
    world = new World();
    const seen: { invocation: Invocation; current: Invocation | undefined; aborted: boolean }[] = [];
    const tick = every('tick', 60_000, async ({ invocation, signal }) => {
      await Promise.resolve();
      seen.push({ invocation, current: currentInvocation(), aborted: signal.aborted });
    });
    const a = world.replica([tick]);
    const b = world.replica([tick]);
    await world.advance(0);
    const leaders = [a, b].filter((r) => r.scheduler.snapshot().leader);
    expect(leaders).toHaveLength(1);
    await world.advance(5 * 60_000);
    expect(seen.map((s) => iso(s.invocation.intendedAt))).toEqual([
      iso(T0),
      iso(T0 + 60_000),
      iso(T0 + 120_000),
      iso(T0 + 180_000),
      iso(T0 + 240_000),
    ]);
    for (const s of seen) {
      expect(s.current).toEqual(s.invocation);
      expect(s.aborted).toBe(false);
      expect(s.invocation.origin).toBe('scheduled');
      expect(s.invocation.occurrence).toBe(
        occurrenceId(
          { namespace: 'duetime', environment: 'production', group: 'default' },
          'tick',
          s.invocation.intendedAt.getTime(),
        ),
      );
    }
    expect(currentInvocation()).toBeUndefined();
    const leader = leaders[0]!.scheduler;
    expect(outcomes(records(leader, 'tick'))).toEqual(Array(5).fill('succeeded'));
    expect(leader.snapshot().schedules[0]?.cursor?.getTime()).toBe(T0 + 240_000);
    expect(
      (await world.backend.cursors.read('duetime/calendar/production/default/cursor/tick'))?.getTime(),
    ).toBe(T0 + 240_000);
  });

  it('fires a daily wall-clock time once per day, skips it in the spring gap and twice in the autumn overlap', async () => {
    world = new World(Date.UTC(2026, 2, 27, 12, 0, 0)); // Friday before the EU spring change
    const seen: string[] = [];
    const declarations = [
      calendar('Europe/Berlin').dailyAt('gap', '02:30', ({ invocation }) => {
        seen.push(`gap ${iso(invocation.intendedAt)}`);
      }),
    ];
    world.replica(declarations, { pollInterval: 3_600_000, leadershipTTL: 3 * 3_600_000 });
    await world.advance(4 * 86_400_000);
    // 28 March 02:30 CET = 01:30Z; 29 March 02:30 does not exist in Berlin; 30 March 02:30 CEST = 00:30Z.
    expect(seen).toEqual([
      'gap 2026-03-28T01:30:00.000Z',
      'gap 2026-03-30T00:30:00.000Z',
      'gap 2026-03-31T00:30:00.000Z',
    ]);
  });

  it('fires twice when a local time repeats at the autumn change (two UTC instants)', async () => {
    world = new World(Date.UTC(2026, 9, 24, 12, 0, 0));
    const seen: string[] = [];
    world.replica(
      [
        calendar('Europe/Berlin').dailyAt(
          'overlap',
          '02:30',
          ({ invocation }) => void seen.push(iso(invocation.intendedAt)),
        ),
      ],
      { pollInterval: 3_600_000, leadershipTTL: 3 * 3_600_000 },
    );
    await world.advance(2 * 86_400_000);
    // 24 October 02:30 CEST was before the start; 26 October 02:30 CET = 01:30Z.
    expect(seen).toEqual([
      '2026-10-25T00:30:00.000Z',
      '2026-10-25T01:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
  });

  it('runs the last day of the month and skips days, between and lastDayOfMonth filters silently', async () => {
    world = new World(Date.UTC(2026, 1, 26, 0, 0, 0)); // Thursday 26 February
    const seen: string[] = [];
    const record =
      (label: string) =>
      ({ invocation }: { invocation: Invocation }) => {
        seen.push(`${label} ${iso(invocation.intendedAt)}`);
      };
    const utc = calendar('UTC');
    const scheduler = world.replica(
      [
        utc.lastDayOfMonthAt('month-end', '17:00', record('month-end')),
        utc.hourly('weekend-only', record('weekend')).with({ days: ['SAT'], between: ['09:00', '10:00'] }),
        utc
          .hourly('last-day-hourly', record('last-day'))
          .with({ lastDayOfMonth: true, between: ['22:00', '23:00'] }),
      ],
      { pollInterval: 3_600_000, leadershipTTL: 3 * 3_600_000 },
    ).scheduler;
    await world.advance(4 * 86_400_000);
    expect(seen).toEqual(
      [
        'month-end 2026-02-28T17:00:00.000Z',
        'weekend 2026-02-28T09:00:00.000Z',
        'weekend 2026-02-28T10:00:00.000Z',
        'last-day 2026-02-28T22:00:00.000Z',
        'last-day 2026-02-28T23:00:00.000Z',
      ].sort((x, y) => x.slice(-24).localeCompare(y.slice(-24))),
    );
    // Filtered occurrences leave no record at all.
    expect(records(scheduler).every((r) => r.state === State.Succeeded)).toBe(true);
    expect(records(scheduler)).toHaveLength(5);
  });

  it('leaves declarations of other environments inactive', async () => {
    world = new World();
    let ran = 0;
    const { scheduler } = world.replica(
      [every('staging-only', 60_000, () => void ran++).with({ environments: ['staging'] })],
      { environment: 'production' },
    );
    await world.advance(5 * 60_000);
    expect(ran).toBe(0);
    expect(scheduler.describe().schedules[0]).toMatchObject({ id: 'staging-only', active: false });
    expect(scheduler.snapshot().schedules[0]?.active).toBe(false);
  });

  it('admits at most maxPerTick occurrences per tick and still runs every due one', async () => {
    world = new World();
    let ran = 0;
    const declarations = Array.from({ length: 7 }, (_, i) => every(`s${i}`, 60_000, () => void ran++));
    const { scheduler } = world.replica(declarations, { maxPerTick: 2 });
    await world.advance(30_000);
    expect(ran).toBe(7);
    expect(records(scheduler).filter((r) => r.state === State.Succeeded)).toHaveLength(7);
  });

  it('runs a declaration on demand with runNow and returns its record, without moving the cursor', async () => {
    world = new World();
    const { scheduler } = world.replica([every('job', 3_600_000, async () => {})]);
    await world.advance(0);
    const record = await scheduler.runNow('job');
    expect(record).toMatchObject({ schedule: 'job', origin: 'manual', state: 'succeeded' });
    expect(record.occurrence).toMatch(/^[0-9a-f]{32}$/);
    expect(scheduler.snapshot().schedules[0]?.cursor).toBeUndefined();
    await expect(scheduler.runNow('nope')).rejects.toMatchObject({ code: 'DUETIME_NOT_FOUND' });
    await expect(scheduler.runNow('nope')).rejects.toBeInstanceOf(DuetimeError);
  });

  it('bounds the history by maxHistory while counting everything', async () => {
    world = new World();
    const { scheduler } = world.replica([every('often', 1000, () => {})], { maxHistory: 5 });
    await world.advance(20_000);
    const snapshot = scheduler.snapshot();
    expect(snapshot.history).toHaveLength(5);
    const total = snapshot.counts.succeeded as number;
    expect(total).toBeGreaterThanOrEqual(20);
    expect(snapshot.history.map((r) => r.seq)).toEqual([total - 4, total - 3, total - 2, total - 1, total]);
  });

  it('describes itself and its declarations as JSON-safe data', async () => {
    world = new World();
    const { scheduler } = world.replica([
      calendar('Europe/Berlin')
        .dailyAt('report', '09:00', () => {})
        .with({ timeout: 5000, before: () => {} }),
    ]);
    const description = scheduler.describe();
    expect(JSON.parse(JSON.stringify(description))).toEqual(description);
    expect(description.schedules[0]).toMatchObject({
      id: 'report',
      kind: 'cron',
      active: true,
      spec: { kind: 'cron', expression: '0 9 * * *', timeZone: 'Europe/Berlin' },
      options: { timeout: 5000, hooks: ['before'] },
    });
    expect(JSON.parse(JSON.stringify(scheduler.snapshot())).owner).toBe(scheduler.describe().owner);
  });

  it('rejects bad configuration naming the field and the value', () => {
    world = new World();
    const registry = new Registry(every('x', 1000, () => {}));
    const make = (config: Record<string, unknown>) => () =>
      new Scheduler({ registry, leases: world.backend.leases, ...config } as never);
    expect(make({ leadershipTTL: 0 })).toThrow(/config\.leadershipTTL 0/);
    expect(make({ pollInterval: -1 })).toThrow(/config\.pollInterval -1/);
    expect(make({ concurrency: 0 })).toThrow(/config\.concurrency 0/);
    expect(make({ grace: Number.NaN })).toThrow(/config\.grace NaN/);
    expect(make({ group: '' })).toThrow(/config\.group ""/);
    expect(make({ registry: [] })).toThrow(/config\.registry/);
    expect(make({ leases: undefined })).toThrow(/config\.leases/);
    expect(make({ cursorTTL: 1000 })).toThrow(/config\.cursorTTL 1000/);
    expect(make({ maintenance: 'yes' })).toThrow(/config\.maintenance "yes"/);
  });
});

describe('Scheduler: the run signal', () => {
  it('leaves no listener on a long-lived signal once stopped by drain() (found by the reliability suite)', async () => {
    world = new World();
    const shutdown = new AbortController();
    for (let i = 0; i < 20; i++) {
      const scheduler = new Scheduler({
        registry: new Registry(every('job', 60_000, () => {})),
        backend: world.backend,
        clock: world.clock,
      });
      const done = scheduler.run(shutdown.signal);
      await world.advance(0);
      const draining = scheduler.drain();
      await world.advance(0);
      await draining;
      await done;
    }
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
  });
});

describe('Scheduler: handlers that misbehave', () => {
  it('records handler_failed, panicked and timed_out, and a handler that never settles stops nobody', async () => {
    world = new World();
    const healthy: number[] = [];
    const { scheduler } = world.replica(
      [
        every('rejects', 60_000, async () => {
          throw new Error('boom');
        }),
        every('throws', 60_000, () => {
          throw new Error('sync boom');
        }),
        every('hangs', 60_000, () => new Promise(() => {})).with({ timeout: 10_000 }),
        every('healthy', 60_000, ({ invocation }) => void healthy.push(invocation.intendedAt.getTime())),
      ],
      { concurrency: 2 },
    );
    await world.advance(3 * 60_000);
    expect(healthy).toEqual([T0, T0 + 60_000, T0 + 120_000]);
    expect(outcomes(records(scheduler, 'rejects'))).toEqual(Array(3).fill('failed/handler_failed'));
    expect(records(scheduler, 'rejects')[0]?.error).toBe('Error: boom');
    expect(outcomes(records(scheduler, 'throws'))).toEqual(Array(3).fill('failed/panicked'));
    expect(outcomes(records(scheduler, 'hangs')).slice(0, 2)).toEqual([
      'failed/timed_out',
      'failed/timed_out',
    ]);
    // Failed runs move the cursor like successful ones.
    const cursor = scheduler.snapshot().schedules.find((s) => s.id === 'rejects')?.cursor;
    expect(cursor?.getTime()).toBe(T0 + 120_000);
  });

  it('aborts a timed-out handler with a TimedOut reason on its signal', async () => {
    world = new World();
    const reasons: unknown[] = [];
    world.replica([
      every(
        'slow',
        60_000,
        ({ signal }) =>
          new Promise<void>((resolve) => {
            signal.addEventListener('abort', () => {
              reasons.push(signal.reason);
              resolve();
            });
          }),
      ).with({ timeout: 1000 }),
    ]);
    await world.advance(31_000);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatchObject({ reason: Reason.TimedOut, code: 'DUETIME_TIMEOUT' });
  });

  it('runs before, handler, after in order; failed hook gets the error; hook errors are hook_failed', async () => {
    world = new World();
    const log: string[] = [];
    const hooks = {
      before: () => void log.push('before'),
      after: () => void log.push('after'),
      failed: (_c: unknown, error: unknown) => void log.push(`failed:${(error as Error).message}`),
    };
    const { scheduler } = world.replica([
      every('ok', 60_000, () => void log.push('ok')).with(hooks),
      every('bad', 60_000, async () => {
        log.push('bad');
        throw new Error('nope');
      })
        .with(hooks)
        .with({ before: () => void log.push('before-bad') }),
      every('before-throws', 60_000, () => void log.push('never')).with({
        before: () => {
          throw new Error('guard');
        },
      }),
      every('after-throws', 60_000, () => void log.push('ran')).with({
        after: () => {
          throw new Error('late');
        },
      }),
    ]);
    await world.advance(60_000);
    const order = (...entries: string[]) => entries.map((e) => log.indexOf(e));
    const [before, ok, after] = order('before', 'ok', 'after');
    expect(before).toBeGreaterThanOrEqual(0);
    expect(before).toBeLessThan(ok as number);
    expect(ok).toBeLessThan(after as number);
    const [beforeBad, bad, failed] = order('before-bad', 'bad', 'failed:nope');
    expect(beforeBad).toBeGreaterThanOrEqual(0);
    expect(beforeBad).toBeLessThan(bad as number);
    expect(bad).toBeLessThan(failed as number);
    expect(log.filter((e) => e === 'after')).toHaveLength(1);
    expect(log).toContain('ran');
    expect(log).not.toContain('never');
    expect(outcomes(records(scheduler, 'before-throws'))).toEqual(['failed/hook_failed']);
    expect(outcomes(records(scheduler, 'after-throws'))).toEqual(['failed/hook_failed']);
    expect(records(scheduler, 'after-throws')[0]?.error).toBe('Error: late');
  });

  it('skips as filtered when `when` says no or in maintenance, unless evenInMaintenanceMode', async () => {
    world = new World();
    let maintenance = false;
    const ran: string[] = [];
    const { scheduler } = world.replica(
      [
        every('even-minutes', 60_000, () => void ran.push('odd')).with({
          when: (inv) => new Date(inv.intendedAt).getUTCMinutes() % 2 === 0,
        }),
        every('broken-when', 60_000, () => void ran.push('never')).with({
          when: () => {
            throw new Error('predicate');
          },
        }),
        every('maint', 60_000, () => void ran.push('maint')),
        every('always', 60_000, () => void ran.push('always')).with({ evenInMaintenanceMode: true }),
      ],
      { maintenance: () => maintenance },
    );
    await world.advance(60_000);
    maintenance = true;
    await world.advance(60_000);
    expect(outcomes(records(scheduler, 'even-minutes'))).toEqual(['succeeded', 'skipped/filtered']);
    expect(outcomes(records(scheduler, 'broken-when'))).toEqual(['failed/hook_failed', 'skipped/filtered']);
    expect(outcomes(records(scheduler, 'maint'))).toEqual(['succeeded', 'skipped/filtered']);
    expect(records(scheduler, 'maint')[1]?.detail).toBe('maintenance');
    expect(outcomes(records(scheduler, 'always'))).toEqual(['succeeded', 'succeeded']);
    expect(ran).not.toContain('never');
  });

  it('waits capacityWait for a slot, then skips as capacity_reached', async () => {
    world = new World();
    const gate = deferred();
    const { scheduler } = world.replica(
      [
        every('hog', 60_000, () => gate.promise).with({ withoutOverlap: false }),
        every('patient', 60_000, () => {}),
      ],
      { concurrency: 1, capacityWait: 2000 },
    );
    await world.advance(30_000);
    expect(scheduler.snapshot().waiting).toBe(1);
    await world.advance(1999);
    expect(records(scheduler, 'patient')).toEqual([]);
    await world.advance(1);
    expect(outcomes(records(scheduler, 'patient'))).toEqual(['skipped/capacity_reached']);
    gate.resolve();
    await world.advance(60_000);
    expect(outcomes(records(scheduler, 'patient')).at(-1)).toBe('succeeded');
  });

  it('gives a waiting occurrence the slot that frees up within capacityWait', async () => {
    world = new World();
    const gate = deferred();
    const { scheduler } = world.replica(
      [every('a-hog', 60_000, () => gate.promise), every('b-patient', 60_000, () => {})],
      { concurrency: 1, capacityWait: 5000 },
    );
    await world.advance(30_000);
    await world.advance(1000);
    gate.resolve();
    await world.advance(0);
    expect(outcomes(records(scheduler, 'b-patient'))).toEqual(['succeeded']);
  });
});
