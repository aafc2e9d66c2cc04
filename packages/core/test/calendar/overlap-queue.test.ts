import { afterEach, describe, expect, it } from 'vitest';
import { every, InvalidArgumentError, Reason, State } from '../../src/index.js';
import { deferred, outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;
const LEADER_KEY = 'duetime/calendar/production/default/leader';
const overlapKey = (id: string) => `duetime/calendar/production/default/overlap/${id}`;

/** A schedule every minute whose runs finish when the test says, one gate per run, in order. */
function gated(options: Parameters<ReturnType<typeof every>['with']>[0]) {
  const gates = Array.from({ length: 10 }, () => deferred());
  const started: number[] = [];
  const declaration = every('job', MINUTE, ({ invocation }) => {
    started.push(invocation.intendedAt.getTime());
    return gates[started.length - 1]?.promise;
  }).with(options);
  return { declaration, gates, started };
}

describe('withoutOverlap with onOverlap: queue', () => {
  it('runs an occurrence that found the previous run going as soon as it ends, and skips further ones while it waits', async () => {
    world = new World();
    const { declaration, gates, started } = gated({ withoutOverlap: true, onOverlap: 'queue' });
    const a = world.replica([declaration]);
    await world.advance(30_000); // T0 starts
    await world.advance(MINUTE); // T0+1 finds T0 running: it waits
    expect(started).toEqual([T0]);
    expect(a.scheduler.snapshot()).toMatchObject({ queued: 1, running: 1, waiting: 0 });
    await world.advance(MINUTE); // T0+2 finds T0+1 waiting: skipped
    const busy = records(a.scheduler, 'job').find((r) => r.reason === Reason.OverlapBusy);
    expect(busy).toMatchObject({
      intendedAt: new Date(T0 + 2 * MINUTE),
      state: State.Skipped,
      detail: 'a run is already queued',
    });
    gates[0]?.resolve(); // T0 ends: T0+1 runs at once, as itself
    await world.advance(0);
    expect(started).toEqual([T0, T0 + MINUTE]);
    expect(a.scheduler.snapshot().queued).toBe(0);
    const running = records(a.scheduler, 'job').find((r) => r.state === State.Running);
    expect(running).toMatchObject({ intendedAt: new Date(T0 + MINUTE), origin: 'scheduled' });
    gates[1]?.resolve();
    await world.advance(0);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['succeeded', 'skipped/overlap_busy', 'succeeded']);
    // The waiting occurrence held the cursor back; now it is past all three.
    expect(a.scheduler.snapshot().schedules[0]?.cursor?.getTime()).toBe(T0 + 2 * MINUTE);
    gates[2]?.resolve();
    await world.advance(MINUTE);
    expect(started.at(-1)).toBe(T0 + 3 * MINUTE);
  });

  it('holds no concurrency slot while it waits, so a single slot never turns waiting into capacity_reached', async () => {
    world = new World();
    const { declaration, gates, started } = gated({ withoutOverlap: true, onOverlap: 'queue' });
    const a = world.replica([declaration], { concurrency: 1, capacityWait: 1000 });
    await world.advance(30_000 + MINUTE); // T0 runs in the only slot; T0+1 queues
    await world.advance(30_000); // long past capacityWait
    expect(a.scheduler.snapshot()).toMatchObject({ running: 1, waiting: 0, queued: 1 });
    gates[0]?.resolve();
    await world.advance(0);
    expect(started).toEqual([T0, T0 + MINUTE]);
    expect(records(a.scheduler, 'job').some((r) => r.reason === Reason.CapacityReached)).toBe(false);
  });

  it('waits for a holder in another process, asking again every pollInterval', async () => {
    world = new World();
    const holder = await world.backend.leases.acquire(overlapKey('job'), 'another-process', 10 * MINUTE);
    const { declaration, started } = gated({ withoutOverlap: true, onOverlap: 'queue' });
    const a = world.replica([declaration]);
    await world.advance(30_000 + 10_000);
    expect(started).toEqual([]);
    expect(a.scheduler.snapshot().queued).toBe(1);
    await world.backend.leases.release(overlapKey('job'), 'another-process', holder!.token);
    await world.advance(1000); // the next retry finds the lease free
    expect(started).toEqual([T0]);
  });

  it('keeps the queued occurrence first when the holder elsewhere lets go between its retries', async () => {
    world = new World();
    const holder = await world.backend.leases.acquire(overlapKey('job'), 'another-process', 10 * MINUTE);
    const { declaration, gates, started } = gated({ withoutOverlap: true, onOverlap: 'queue' });
    // Retries every 700 ms from T0: at T0+59.5 s and T0+60.2 s, around the next occurrence at T0+60 s.
    const a = world.replica([declaration], { pollInterval: 700 });
    await world.advance(30_000 + 59_600); // T0 waits; the holder still holds at T0+59.5 s
    expect(a.scheduler.snapshot().queued).toBe(1);
    await world.backend.leases.release(overlapKey('job'), 'another-process', holder!.token);
    await world.advance(400); // T0+60 s comes first and finds T0 waiting: skipped, not run ahead of it
    expect(started).toEqual([]);
    const busy = records(a.scheduler, 'job').find((r) => r.reason === Reason.OverlapBusy);
    expect(busy).toMatchObject({ intendedAt: new Date(T0 + MINUTE), detail: 'a run is already queued' });
    await world.advance(200); // T0's retry at T0+60.2 s takes the lease
    expect(started).toEqual([T0]);
    gates[0]?.resolve();
    await world.advance(0);
    // In the order they were decided: T0+60 s skipped, then T0 ran.
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['skipped/overlap_busy', 'succeeded']);
    expect(records(a.scheduler, 'job').find((r) => r.state === State.Succeeded)?.intendedAt).toEqual(
      new Date(T0),
    );
  });

  it('cancels the waiting occurrence on drain (stopped) and on loss of leadership (leadership_lost)', async () => {
    world = new World();
    const first = gated({ withoutOverlap: true, onOverlap: 'queue' });
    const a = world.replica([first.declaration]);
    await world.advance(30_000 + MINUTE);
    expect(a.scheduler.snapshot().queued).toBe(1);
    a.leases.fail('renew', LEADER_KEY);
    a.leases.fail('acquire', LEADER_KEY);
    await world.advance(3000);
    expect(a.scheduler.snapshot().leader).toBe(false);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual([
      'cancelled/leadership_lost',
      'cancelled/leadership_lost',
    ]);
    expect(a.scheduler.snapshot().queued).toBe(0);
    for (const gate of first.gates) gate.resolve();

    world = new World();
    const second = gated({ withoutOverlap: true, onOverlap: 'queue' });
    const b = world.replica([second.declaration], { drainTimeout: 60_000 });
    await world.advance(30_000 + MINUTE);
    expect(b.scheduler.snapshot().queued).toBe(1);
    const draining = b.scheduler.drain();
    await world.advance(0);
    // The queued occurrence is cancelled at once; the running one may finish.
    expect(outcomes(records(b.scheduler, 'job'))).toEqual(['running', 'cancelled/stopped']);
    second.gates[0]?.resolve();
    await world.advance(0);
    await draining;
    expect(second.started).toEqual([T0]);
    expect(outcomes(records(b.scheduler, 'job'))).toEqual(['succeeded', 'cancelled/stopped']);
  });

  it('keeps skipping by default: an overlap_busy occurrence is gone for good', async () => {
    world = new World();
    const { declaration, gates, started } = gated({ withoutOverlap: true });
    const a = world.replica([declaration]);
    await world.advance(30_000 + MINUTE);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['running', 'skipped/overlap_busy']);
    gates[0]?.resolve();
    await world.advance(30_000);
    expect(started).toEqual([T0]);
    expect(a.scheduler.snapshot().queued).toBe(0);
  });

  it('validates onOverlap at declaration time, naming the field', () => {
    const attempt = (options: object) => {
      try {
        every('job', MINUTE, () => {}).with(options);
      } catch (error) {
        return error as InvalidArgumentError;
      }
      return undefined;
    };
    const bad = attempt({ withoutOverlap: true, onOverlap: 'later' });
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect(bad).toMatchObject({ field: 'options.onOverlap', value: 'later' });
    expect(bad?.message).toMatch(/must be "skip" or "queue"/);
    const alone = attempt({ onOverlap: 'queue' });
    expect(alone).toMatchObject({ field: 'options.onOverlap', value: 'queue' });
    expect(alone?.message).toMatch(/applies only with withoutOverlap: true/);
    const queued = every('job', MINUTE, () => {}).with({ withoutOverlap: true, onOverlap: 'queue' });
    expect(queued.options.onOverlap).toBe('queue');
    expect(queued.describe().options).toMatchObject({ withoutOverlap: true, onOverlap: 'queue' });
    expect(every('job', MINUTE, () => {}).with({ withoutOverlap: true }).options.onOverlap).toBe('skip');
  });
});
