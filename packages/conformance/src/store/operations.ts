import {
  type DeliveryContext,
  Dispatcher,
  intervalFrom,
  NotFoundError,
  recurring,
  type Store,
} from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';

const MINUTE = 60_000;
const HOUR = 3_600_000;

interface Run {
  key: string;
  at: number;
  kind?: string;
  id?: string;
}

/** A dispatcher on `store` that records every delivery (its key, occurrence instant, kind and id). */
function recorder(store: Store<unknown>): { dispatcher: Dispatcher; runs: Run[] } {
  const runs: Run[] = [];
  const dispatcher = new Dispatcher({
    store,
    rescanInterval: 200,
    retryDelay: 10,
    processor: async (_tx, _message, context: DeliveryContext) => {
      runs.push({
        key: context.schedule.key,
        at: (context.occurrence?.at ?? context.schedule.at).getTime(),
        ...(context.occurrence?.kind ? { kind: context.occurrence.kind } : {}),
        ...(context.occurrence?.id ? { id: context.occurrence.id } : {}),
      });
    },
  });
  return { dispatcher, runs };
}

/**
 * Operating schedules: pause and resume, trigger, backfill. Each rewrites the schedule as a new version
 * whose stored state the backend keeps as given; what a dispatcher then delivers, and what a reader sees,
 * must be the same on every backend (and survive reopening it).
 */
export function operationTests({ harness }: SuiteContext): void {
  it('keeps a paused one-shot schedule from every dispatcher until it is resumed, across reopening the store', async () => {
    const first = await harness().open();
    await first.store.transact(async (tx) => {
      await tx.schedule('ops/paused', new Date(Date.now() - 2000), { type: 'ops' });
      await tx.schedule('ops/marker', new Date(Date.now() - 1000), { type: 'ops' });
      expect(await tx.pauseSchedule('ops/paused', { note: 'hold it' })).toBe(true);
    });
    const reopened = await harness().open(first.namespace);
    const paused = await reopened.store.loadSchedule('ops/paused');
    expect(paused?.paused?.note).toBe('hold it');
    expect(paused?.paused?.at).toBeInstanceOf(Date);
    const { dispatcher, runs } = recorder(reopened.store);
    harness().run(dispatcher);
    // The marker was due after the paused schedule: delivering it means the paused one was passed over.
    await waitFor('the marker to be delivered', () => runs.some((r) => r.key === 'ops/marker'));
    expect(runs.map((r) => r.key)).toEqual(['ops/marker']);
    // The processor ran; its delivery commits right after: then only the paused one is left.
    await waitFor(
      'the marker’s delivery to commit',
      async () => (await reopened.store.countSchedules()) === 1,
    );
    expect(runs.map((r) => r.key)).toEqual(['ops/marker']);
    expect(await first.store.transact((tx) => tx.pauseSchedule('ops/paused'))).toBe(false);
    const resumed = await first.store.transact((tx) => tx.resumeSchedule('ops/paused'));
    expect(resumed.resumed).toBe(true);
    await waitFor('the resumed schedule to be delivered', async () => runs.length === 2);
    expect(runs.map((r) => r.key)).toEqual(['ops/marker', 'ops/paused']);
    await waitFor('nothing to be left', async () => (await reopened.store.countSchedules()) === 0);
  });

  it('triggers an extra delivery of a recurring schedule now, with an id of its own, without moving its next occurrence', async () => {
    const { store } = await harness().open();
    const start = new Date(Math.ceil((Date.now() + HOUR) / MINUTE) * MINUTE);
    await store.transact((tx) =>
      tx.schedule('ops/digest', recurring(intervalFrom(HOUR, start), { startAt: start }), { type: 'digest' }),
    );
    const before = (await store.loadSchedule('ops/digest'))!;
    const id = await store.transact((tx) => tx.triggerSchedule('ops/digest'));
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    const queued = (await store.loadSchedule('ops/digest'))!;
    expect(queued.version).toBeGreaterThan(before.version);
    expect(queued.at.getTime()).toBe(start.getTime());
    const { dispatcher, runs } = recorder(store);
    harness().run(dispatcher);
    await waitFor('the triggered delivery', () => runs.length === 1);
    expect(runs[0]).toMatchObject({ key: 'ops/digest', kind: 'triggered', id });
    await waitFor('the trigger to be settled', async () => {
      const after = await store.loadSchedule('ops/digest');
      return after !== undefined && after.version > queued.version;
    });
    const after = (await store.loadSchedule('ops/digest'))!;
    expect(after.at.getTime()).toBe(start.getTime());
    expect(after.dueAt.getTime()).toBe(start.getTime());
    expect(runs).toHaveLength(1);
  });

  it('backfills past occurrences of a recurring schedule, delivered oldest first as backfills', async () => {
    const { store } = await harness().open();
    const origin = new Date(Math.floor(Date.now() / MINUTE) * MINUTE - 10 * MINUTE);
    const next = new Date(origin.getTime() + 2 * HOUR);
    await store.transact((tx) =>
      tx.schedule('ops/report', recurring(intervalFrom(MINUTE, origin), { startAt: next }), {
        type: 'report',
      }),
    );
    const from = new Date(origin.getTime() + 2 * MINUTE);
    const to = new Date(origin.getTime() + 5 * MINUTE);
    const instants = await store.transact((tx) => tx.backfillSchedule('ops/report', { from, to }));
    expect(instants.map((d) => d.getTime())).toEqual([2, 3, 4].map((m) => origin.getTime() + m * MINUTE));
    const { dispatcher, runs } = recorder(store);
    harness().run(dispatcher);
    await waitFor('three backfilled deliveries', () => runs.length === 3);
    expect(runs.map((r) => [r.at, r.kind])).toEqual(instants.map((d) => [d.getTime(), 'backfill']));
    const left = (await store.loadSchedule('ops/report'))!;
    expect(left.at.getTime()).toBe(next.getTime());
  });

  it('refuses an operation on a key with no schedule with a NotFoundError naming it, writing nothing', async () => {
    const { store } = await harness().open();
    for (const operate of [
      (key: string) => store.transact((tx) => tx.pauseSchedule(key)),
      (key: string) => store.transact((tx) => tx.resumeSchedule(key)),
      (key: string) => store.transact((tx) => tx.triggerSchedule(key)),
    ]) {
      const error = await operate('ops/none').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(NotFoundError);
      expect((error as Error).message).toContain('ops/none');
    }
    expect(await store.countSchedules()).toBe(0);
  });
}
