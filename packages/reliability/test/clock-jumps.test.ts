import { freshNamespace, waitFor } from '@duetime/conformance';
import {
  aggregate,
  Dispatcher,
  every,
  type Invocation,
  ManualClock,
  Reason,
  Registry,
  Scheduler,
  State,
} from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { putMessage } from '../src/effects.js';
import { selectedBackends } from '../src/mode.js';
import { recordResult } from '../src/results.js';
import { assertServiceUp, BACKENDS, dropTarget, newTarget, openTarget } from '../src/targets.js';

const SECOND = 1000;
const GRACE = 5 * SECOND;
const HOUR = 3_600_000;

const ticks = aggregate({
  type: 'reliability-clock-ticks',
  initial: 0,
  apply: { ran: (n: number) => n + 1 },
});

/** Grid instants of a 1 s `every` in (from, to]. */
function instants(from: number, to: number): number[] {
  const out: number[] = [];
  for (let at = Math.floor(from / SECOND) * SECOND + SECOND; at <= to; at += SECOND) out.push(at);
  return out;
}

describe.each(selectedBackends(BACKENDS))('clock jumps on %s', (kind) => {
  it('a scheduler whose clock jumps an hour forward, then ten minutes back, runs each occurrence at most once and in order, and reports the skipped ones', async () => {
    await assertServiceUp(kind);
    const target = newTarget(kind, freshNamespace());
    const backend = await openTarget(target);
    // Leases are judged by the backend (the server's clock); only the scheduler's clock jumps. The lease
    // TTL is long in real time, since renewals happen only as the test moves the manual clock.
    const start = Date.UTC(2026, 5, 1, 12, 0, 0) + 500;
    const clock = new ManualClock(start);
    const runs: { at: number; now: number; invocation: Invocation }[] = [];
    let finished = 0;
    const scheduler = new Scheduler({
      registry: new Registry(
        every('tick', SECOND, async ({ invocation }) => {
          runs.push({ at: invocation.intendedAt.getTime(), now: clock.now(), invocation });
          await backend.store.transact(
            (tx) =>
              tx.exec(ticks, 'clock/ticks', (_n, ag) =>
                ag.raise('ran', { at: invocation.intendedAt.getTime(), occurrence: invocation.occurrence }),
              ),
            { maxRetries: 50 },
          );
          finished++;
        }),
      ),
      backend,
      clock,
      namespace: 'rel',
      group: 'clock',
      leadershipTTL: 120_000,
      pollInterval: SECOND,
      grace: GRACE,
    });
    const running = scheduler.run();
    const ran = (at: number) => runs.some((r) => r.at === at);
    const history = () => scheduler.snapshot().history;
    // Before a jump, let every run finish and its cursor land, so what the jump does is all there is.
    const settled = () =>
      waitFor('the runs so far to finish and their cursor to be persisted', () => {
        const cursor = scheduler.snapshot().schedules[0]?.cursor?.getTime();
        return finished === runs.length && cursor === Math.max(...runs.map((r) => r.at));
      });
    try {
      // A first start runs nothing that was due before it started (start - 5 s … start stay untouched,
      // though within grace): it leads, and looks next at the first whole second after the start.
      await waitFor(
        'the first start to plan its next occurrence',
        () => scheduler.snapshot().schedules[0]?.next?.getTime() === instants(start, start + SECOND)[0],
      );
      expect(runs, 'runs of occurrences due before the start').toEqual([]);
      for (let i = 1; i <= 3; i++) {
        await clock.advance(SECOND);
        await waitFor(`the occurrence ${i} s later to run`, () =>
          ran(Math.floor(clock.now() / SECOND) * SECOND),
        );
      }
      await settled();
      const beforeJump = clock.now();
      const lastBeforeJump = Math.max(...runs.map((r) => r.at));

      // An hour forward: what is older than grace is one `missed` record, what is within grace runs.
      clock.set(beforeJump + HOUR);
      const jumpedTo = clock.now();
      await clock.advance(0);
      await waitFor('the occurrences within grace after the jump to run', () =>
        instants(jumpedTo - GRACE, jumpedTo).every(ran),
      );
      const skippedByJump = instants(lastBeforeJump, jumpedTo - GRACE);
      const missed = history().filter((r) => r.state === State.Skipped && r.reason === Reason.Missed);
      expect(missed.reduce((n, r) => n + (r.count ?? 1), 0)).toBe(skippedByJump.length);
      expect(runs.filter((r) => skippedByJump.includes(r.at))).toEqual([]);
      for (let i = 1; i <= 2; i++) {
        await clock.advance(SECOND);
        const at = Math.floor(clock.now() / SECOND) * SECOND;
        await waitFor(`the occurrence at +${i} s after the jump to run`, () => ran(at));
      }
      await settled();
      const highWater = clock.now();
      const runsBeforeBack = runs.length;

      // Ten minutes back: time holds at its high-water mark; nothing is re-admitted; one clock incident.
      // (A manual clock's timers are absolute: after a jump back, wake the scheduler as a real timer would.)
      clock.set(highWater - 600_000);
      scheduler.wake();
      for (let i = 0; i < 5; i++) await clock.advance(SECOND);
      await waitFor('the scheduler to report the clock running backwards', () =>
        history().some((r) => r.schedule === '*' && r.reason === Reason.ClockFailed),
      );
      for (let i = 0; i < 5; i++) await clock.advance(SECOND);
      expect(runs.slice(runsBeforeBack), 'runs while the clock was behind').toEqual([]);

      // The clock catches up and passes the high-water mark: runs resume right after the last one.
      const lastRun = Math.max(...runs.map((r) => r.at));
      clock.set(highWater + 2 * SECOND);
      await clock.advance(0);
      await waitFor('runs to resume after the high-water mark', () =>
        instants(lastRun, highWater + 2 * SECOND).every(ran),
      );
      await settled();
      await scheduler.drain();
      await running;

      const ats = runs.map((r) => r.at);
      const durable = (await backend.store.loadEvents('clock/ticks')).map(
        (e) => (e.data as { at: number }).at,
      );
      const expected = [...instants(start, lastBeforeJump), ...instants(jumpedTo - GRACE, Math.max(...ats))];
      console.log(
        `[clock jumps ${kind}] runs ${runs.length}, missed by the forward jump ${skippedByJump.length}, ` +
          `runs while behind ${runs.length - runsBeforeBack - instants(lastRun, highWater + 2 * SECOND).length}`,
      );
      recordResult('clock-jumps', kind, 0, {
        runs: runs.length,
        missedReported: skippedByJump.length,
        duplicated: ats.length - new Set(ats).size,
      });
      expect(new Set(ats).size, 'no occurrence ran twice').toBe(ats.length);
      expect(
        [...ats].sort((x, y) => x - y),
        'occurrences ran in order',
      ).toEqual(ats);
      expect(ats).toEqual(expected);
      expect([...durable].sort((x, y) => x - y)).toEqual(expected);
    } finally {
      await scheduler.stop();
      await backend.close();
      await dropTarget(target);
    }
  });

  it('a dispatcher whose clock jumps back delivers nothing early, and after a jump forward delivers each message once', async () => {
    await assertServiceUp(kind);
    const target = newTarget(kind, freshNamespace());
    const backend = await openTarget(target);
    const start = Date.UTC(2026, 5, 1, 12, 0, 0);
    const clock = new ManualClock(start);
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      clock,
      rescanInterval: SECOND,
      processor: (_tx, message) => {
        delivered.push((message.data as { put: string }).put);
      },
    });
    try {
      await backend.store.transact(async (tx) => {
        for (let i = 0; i < 20; i++)
          await tx.schedule(
            `jump/${i}`,
            new Date(start + (i + 1) * 60_000),
            putMessage(`jump/${i}`, `p${i}`),
          );
      });
      const running = dispatcher.run();
      // Each step: fire the dispatcher's sleep, then wait until it has looked and armed its next one.
      const step = async (ms: number) => {
        await clock.advance(ms);
        await waitFor('the dispatcher to look and sleep again', () => clock.pendingTimers > 0);
      };
      await waitFor('the dispatcher to start', () => clock.pendingTimers > 0);
      clock.set(start - HOUR);
      dispatcher.wake(); // a manual clock's timers are absolute; a real one would fire
      await waitFor('the dispatcher to look and sleep again', () => clock.pendingTimers > 0);
      for (let i = 0; i < 5; i++) await step(SECOND);
      expect(delivered, 'deliveries while the clock is an hour behind').toEqual([]);
      clock.set(start + 2 * HOUR);
      await step(0);
      await waitFor(
        'every message to be delivered',
        async () => (await backend.store.listSchedules()).length === 0,
      );
      for (let i = 0; i < 3; i++) await step(SECOND);
      await dispatcher.drain();
      await running;
      expect([...delivered].sort()).toEqual(Array.from({ length: 20 }, (_, i) => `p${i}`).sort());
    } finally {
      await dispatcher.drain();
      await backend.close();
      await dropTarget(target);
    }
  });
});
