import { afterEach, describe, expect, it } from 'vitest';
import { every, type Invocation, Reason, State } from '../../src/index.js';
import { deferred, outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;
const LEADER_KEY = 'duetime/calendar/production/default/leader';
const overlapKey = (id: string) => `duetime/calendar/production/default/overlap/${id}`;

describe('Scheduler: leadership and failover', () => {
  it('aborts running handlers when leadership is lost, records leadership_lost, and does not move the cursor', async () => {
    world = new World();
    const gate = deferred();
    const seen: { signal: AbortSignal; invocation: Invocation }[] = [];
    const job = every('job', MINUTE, ({ signal, invocation }) => {
      seen.push({ signal, invocation });
      return gate.promise;
    });
    const a = world.replica([job]);
    await world.advance(30_000); // T0: the handler starts and hangs
    expect(seen).toHaveLength(1);
    expect(a.scheduler.snapshot().leader).toBe(true);
    // The leader can no longer reach the backend to renew leadership.
    a.leases.fail('renew', LEADER_KEY);
    a.leases.fail('acquire', LEADER_KEY);
    await world.advance(3000);
    expect(a.scheduler.snapshot().leader).toBe(false);
    expect(seen[0]?.signal.aborted).toBe(true);
    expect(seen[0]?.signal.reason).toMatchObject({
      reason: Reason.LeadershipLost,
      code: 'DUETIME_LEADERSHIP_LOST',
    });
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['cancelled/leadership_lost']);
    // The cursor stays where this first start began, never past the cancelled occurrence.
    expect(a.scheduler.snapshot().schedules[0]?.cursor?.getTime()).toBe(T0 - MINUTE);
    gate.resolve();
  });

  it('hands over to another replica, which re-runs the cancelled occurrence with the same id', async () => {
    world = new World();
    const gate = deferred();
    const ids: string[] = [];
    const job = every('job', MINUTE, ({ invocation }) => {
      ids.push(invocation.occurrence);
      if (ids.length === 1) return gate.promise;
      return undefined;
    });
    const a = world.replica([job], { leadershipTTL: 3000 });
    await world.advance(30_000);
    const b = world.replica([job], { leadershipTTL: 3000 });
    await world.advance(0);
    expect(b.scheduler.snapshot().leader).toBe(false);
    a.leases.fail('renew');
    a.leases.fail('acquire');
    await world.advance(4000); // a's lease expired on the backend; b takes over within TTL + poll
    expect(b.scheduler.snapshot().leader).toBe(true);
    // T0 was cancelled on a (no cursor), b re-runs it within grace: same occurrence id.
    expect(ids).toHaveLength(2);
    expect(ids[1]).toBe(ids[0]);
    expect(outcomes(records(b.scheduler, 'job'))).toEqual(['succeeded']);
    expect(b.scheduler.snapshot().epoch).toBeGreaterThan(records(a.scheduler, 'job')[0]?.epoch as number);
    gate.resolve();
  });

  it("keeps the old epoch's overlap lease while its handler still runs: the new leader sees overlap_busy", async () => {
    world = new World();
    const gate = deferred();
    let starts = 0;
    const job = every('job', MINUTE, () => {
      starts++;
      return starts === 1 ? gate.promise : undefined;
    }).with({ withoutOverlap: true, overlapTTL: 2000 });
    const a = world.replica([job]);
    await world.advance(30_000); // T0 starts on a and ignores its signal
    const b = world.replica([job]);
    a.leases.fail('renew', LEADER_KEY);
    a.leases.fail('acquire', LEADER_KEY);
    await world.advance(4000);
    expect(b.scheduler.snapshot().leader).toBe(true);
    // a's handler still runs; its overlap lease is renewed independently of leadership.
    expect((await world.backend.leases.holder(overlapKey('job')))?.owner).toMatch(/#1$/);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['cancelled/leadership_lost']);
    expect(outcomes(records(b.scheduler, 'job'))).toEqual(['skipped/overlap_busy']);
    await world.advance(MINUTE); // T0+1: still busy
    expect(outcomes(records(b.scheduler, 'job'))).toEqual(['skipped/overlap_busy', 'skipped/overlap_busy']);
    expect(starts).toBe(1);
    gate.resolve(); // the old handler finally ends and frees the lease
    await world.advance(MINUTE);
    expect(outcomes(records(b.scheduler, 'job')).at(-1)).toBe('succeeded');
    expect(starts).toBe(2);
    // Skips move the cursor: T0 is not run again.
    expect(b.scheduler.snapshot().schedules[0]?.cursor?.getTime()).toBe(T0 + 2 * MINUTE);
  });

  it('records overlap_lost when the overlap lease cannot be kept, and coordination_failed when it cannot be asked for', async () => {
    world = new World();
    const gate = deferred();
    const a = world.replica([
      every('keeps', MINUTE, () => gate.promise).with({ withoutOverlap: true, overlapTTL: 3000 }),
      every('asks', MINUTE, () => {}).with({ withoutOverlap: true }),
    ]);
    a.leases.fail('acquire', overlapKey('asks'));
    await world.advance(30_000);
    a.leases.fail('renew', overlapKey('keeps'));
    await world.advance(3000);
    expect(outcomes(records(a.scheduler, 'keeps'))).toEqual(['cancelled/overlap_lost']);
    expect(outcomes(records(a.scheduler, 'asks'))).toEqual(['skipped/coordination_failed']);
    expect(records(a.scheduler, 'asks')[0]?.error).toMatch(/connection refused/);
    gate.resolve();
  });

  it('drains: keeps leadership and overlap leases while handlers finish, then releases leadership', async () => {
    world = new World();
    const gate = deferred();
    const a = world.replica(
      [every('job', MINUTE, () => gate.promise).with({ withoutOverlap: true, overlapTTL: 2000 })],
      {
        drainTimeout: 60_000,
      },
    );
    await world.advance(30_000);
    const draining = a.scheduler.drain();
    await world.advance(10_000); // well past both TTLs: both leases must have been renewed
    expect(a.scheduler.snapshot().state).toBe('draining');
    expect((await world.backend.leases.holder(LEADER_KEY))?.owner).toBe(a.scheduler.describe().owner);
    expect(await world.backend.leases.holder(overlapKey('job'))).toBeDefined();
    gate.resolve();
    await world.advance(0);
    await draining;
    expect(a.scheduler.snapshot().state).toBe('stopped');
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['succeeded']);
    expect(await world.backend.leases.holder(LEADER_KEY)).toBeUndefined();
    expect(await world.backend.leases.holder(overlapKey('job'))).toBeUndefined();
    expect(
      (await world.backend.cursors.read('duetime/calendar/production/default/cursor/job'))?.getTime(),
    ).toBe(T0);
  });

  it('cancels handlers still running at the drain timeout as stopped, and lets their overlap lease expire', async () => {
    world = new World();
    const signals: AbortSignal[] = [];
    const a = world.replica(
      [
        every('stuck', MINUTE, ({ signal }) => {
          signals.push(signal);
          return new Promise(() => {});
        }).with({ withoutOverlap: true, overlapTTL: 2000 }),
      ],
      { drainTimeout: 5000 },
    );
    await world.advance(30_000);
    const draining = a.scheduler.drain();
    await world.advance(5000);
    await draining;
    expect(signals[0]?.aborted).toBe(true);
    expect(signals[0]?.reason).toMatchObject({ reason: Reason.Stopped });
    expect(outcomes(records(a.scheduler, 'stuck'))).toEqual(['cancelled/stopped']);
    expect(await world.backend.cursors.read('duetime/calendar/production/default/cursor/stuck')).toEqual(
      new Date(T0 - MINUTE),
    );
    expect(await world.backend.leases.holder(overlapKey('stuck'))).toBeDefined();
    await world.advance(2000);
    expect(await world.backend.leases.holder(overlapKey('stuck'))).toBeUndefined();
  });

  it('stop() cancels at once, and occurrences waiting for capacity are cancelled too', async () => {
    world = new World();
    const a = world.replica([every('a', MINUTE, () => new Promise(() => {})), every('b', MINUTE, () => {})], {
      concurrency: 1,
      capacityWait: 10_000,
    });
    await world.advance(30_000);
    expect(a.scheduler.snapshot().waiting).toBe(1);
    await a.scheduler.stop();
    expect(outcomes(records(a.scheduler))).toEqual(['cancelled/stopped', 'cancelled/stopped']);
    expect(a.scheduler.snapshot().state).toBe('stopped');
    await expect(a.scheduler.runNow('b')).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
  });

  it('persists where a first start began, so a leader taking over after a crash catches up instead of starting afresh', async () => {
    // Found by the reliability suite's crash loop: a first leader killed before any of its occurrences
    // finished left no cursor, and the next leader, seeing none, treated itself as a first start and
    // silently dropped every occurrence older than its grace period.
    world = new World();
    const ran: { at: number; origin: string }[] = [];
    const job = every('job', MINUTE, ({ invocation }) => {
      ran.push({ at: invocation.intendedAt.getTime(), origin: invocation.origin });
      if (ran.length === 1) return new Promise(() => {});
      return undefined;
    }).with({ catchUp: { window: 10 * MINUTE, max: 10 } });
    const a = world.replica([job], { grace: 1000 });
    await world.advance(30_000); // T0: a runs it and hangs
    expect(ran).toEqual([{ at: T0, origin: 'scheduled' }]);
    expect(await world.backend.cursors.read('duetime/calendar/production/default/cursor/job')).toEqual(
      new Date(T0 - MINUTE),
    );
    // a is cut off (as if it died); b takes over after the lease expires, when T0 is older than grace.
    a.leases.fail('renew');
    a.leases.fail('acquire');
    const b = world.replica([job], { grace: 1000 });
    await world.advance(5000);
    expect(b.scheduler.snapshot().leader).toBe(true);
    expect(ran).toEqual([
      { at: T0, origin: 'scheduled' },
      { at: T0, origin: 'catch_up' },
    ]);
  });

  it('reports as missed, rather than drops, what a crashed first start admitted when there is no catch-up', async () => {
    world = new World();
    const ran: number[] = [];
    const job = every('job', MINUTE, ({ invocation }) => {
      ran.push(invocation.intendedAt.getTime());
      return new Promise(() => {});
    });
    const a = world.replica([job], { grace: 1000 });
    await world.advance(30_000);
    a.leases.fail('renew');
    a.leases.fail('acquire');
    const b = world.replica([job], { grace: 1000 });
    await world.advance(5000);
    expect(b.scheduler.snapshot().leader).toBe(true);
    await world.advance(MINUTE); // b looks at the schedule again at its next occurrence
    expect(ran).toEqual([T0, T0 + MINUTE]);
    const decided = records(b.scheduler, 'job').filter((r) => r.state !== State.Running);
    expect(decided.map((r) => [r.state, r.reason, r.intendedAt.getTime(), r.count])).toEqual([
      [State.Skipped, Reason.Missed, T0, 1],
    ]);
  });

  it('advances the cursor only past finished occurrences, never past one still running', async () => {
    world = new World();
    const gates = [deferred(), deferred()];
    let n = 0;
    const a = world.replica([every('job', MINUTE, () => gates[n++]?.promise)]);
    await world.advance(30_000 + MINUTE); // T0 (hangs) and T0+1 (hangs)
    await world.advance(MINUTE); // T0+2 finishes at once
    const cursor = () => a.scheduler.snapshot().schedules[0]?.cursor?.getTime();
    // Where the first start began (see the next test), and not past T0 while it runs.
    expect(cursor()).toBe(T0 - MINUTE);
    gates[1]?.resolve();
    await world.advance(0);
    expect(cursor()).toBe(T0 - MINUTE);
    gates[0]?.resolve();
    await world.advance(0);
    expect(cursor()).toBe(T0 + 2 * MINUTE);
    expect(records(a.scheduler, 'job').every((r) => r.state === State.Succeeded)).toBe(true);
  });

  it('reports a backend error on leadership as an error, never as someone else leading', async () => {
    world = new World();
    let ran = 0;
    const a = world.replica([every('job', MINUTE, () => void ran++)], {}, (leases) => leases.fail('acquire'));
    await world.advance(30_000);
    expect(a.scheduler.snapshot().leader).toBe(false);
    expect(ran).toBe(0);
    a.leases.heal();
    await world.advance(1000);
    expect(a.scheduler.snapshot().leader).toBe(true);
    // T0 was due 1 s ago, within grace: it runs now.
    expect(ran).toBe(1);
  });

  it('looks again at once when its wake subscription fires, instead of waiting for the next poll', async () => {
    world = new World();
    let wakeUp: (() => void) | undefined;
    let unsubscribed = false;
    await world.backend.leases.acquire(LEADER_KEY, 'someone-else', 3000);
    const a = world.replica([every('job', MINUTE, () => {})], {
      pollInterval: 600_000,
      wake: (wake) => {
        wakeUp = wake;
        return () => {
          unsubscribed = true;
        };
      },
    });
    await world.advance(0);
    expect(a.scheduler.snapshot().leader).toBe(false);
    const holder = await world.backend.leases.holder(LEADER_KEY);
    await world.backend.leases.release(LEADER_KEY, 'someone-else', holder!.token);
    wakeUp?.();
    await world.advance(0);
    expect(a.scheduler.snapshot().leader).toBe(true);
    await a.scheduler.stop();
    expect(unsubscribed).toBe(true);
  });
});
