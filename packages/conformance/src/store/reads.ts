import {
  Dispatcher,
  type DispatcherOptions,
  intervalFrom,
  recurring,
  type Schedule,
  type SchedulePage,
  type Store,
  silentLogger,
} from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { effectMessage } from './fixtures.js';

const HOUR = 3_600_000;

/** Every page of `query`, followed through its cursors. */
async function allPages(
  store: Store<unknown>,
  query: Parameters<Store<unknown>['pageSchedules']>[0],
): Promise<Schedule[]> {
  const items: Schedule[] = [];
  let page: SchedulePage = await store.pageSchedules(query);
  for (;;) {
    items.push(...page.items);
    if (!page.next) return items;
    page = await store.pageSchedules({ ...query, after: page.next });
  }
}

/**
 * Five schedules `due/0` … `due/4` whose deadlines lie in the past in key order and whose first attempt
 * failed with retries due in the reverse order (`due/0` last, in 5 h; `due/4` first, in 1 h). Returns
 * the time the failures were recorded after.
 */
async function failInReverse(store: Store<unknown>, run: (dispatcher: Dispatcher) => void): Promise<number> {
  await store.transact(async (tx) => {
    for (let i = 0; i < 5; i++)
      await tx.schedule(`due/${i}`, new Date(Date.now() - 10_000 + i), effectMessage(`due-${i}`));
  });
  const started = Date.now();
  const options: DispatcherOptions = {
    store,
    logger: silentLogger,
    rescanInterval: 100,
    retryDelay: (_attempt, error) => Number((error as Error).message) * HOUR,
    processor: async (_tx, _message, { schedule }) => {
      throw new Error(String(5 - Number(schedule.key.slice('due/'.length))));
    },
  };
  run(new Dispatcher(options));
  await waitFor('every first attempt to be recorded', async () => {
    const all = await store.listSchedules();
    return all.length === 5 && all.every((s) => s.attempts === 1);
  });
  return started;
}

/**
 * The store's public reads beyond loading one schedule: pages in due order, the recurring filter, bounded
 * counts of schedules and dead letters, and the next due time. A store that keeps no deadline order
 * (`dueOrder: false`) is checked for the weaker promise: every schedule once, in key order, and no next
 * due time.
 */
export function readTests({ harness, capabilities }: SuiteContext): void {
  const run = (dispatcher: Dispatcher) => void harness().run(dispatcher);

  if (capabilities.dueOrder) {
    it('pages by due time with order "due": retries wait past their deadline', async () => {
      const { store } = await harness().open();
      const started = await failInReverse(store, run);
      const byDeadline = (await store.pageSchedules()).items.map((s) => s.key);
      expect(byDeadline).toEqual(['due/0', 'due/1', 'due/2', 'due/3', 'due/4']);
      const byDue = await allPages(store, { order: 'due', limit: 2 });
      expect(byDue.map((s) => s.key)).toEqual(['due/4', 'due/3', 'due/2', 'due/1', 'due/0']);
      for (let i = 1; i < byDue.length; i++)
        expect(byDue[i]!.dueAt.getTime()).toBeGreaterThanOrEqual(byDue[i - 1]!.dueAt.getTime());
      // `through` bounds the ordering instant: the deadline by default, the due time with order "due".
      const soon = new Date(started + 2.5 * HOUR);
      expect((await store.pageSchedules({ through: soon })).items).toHaveLength(5);
      expect((await store.pageSchedules({ order: 'due', through: soon })).items.map((s) => s.key)).toEqual([
        'due/4',
        'due/3',
      ]);
      expect(await store.countSchedules({ order: 'due', through: soon })).toBe(2);
      expect(await store.countSchedules({ through: soon })).toBe(5);
      expect((await store.nextDueAt())?.getTime()).toBe(byDue[0]!.dueAt.getTime());
    });

    it('tells the earliest due time with nextDueAt, and nothing for an empty store', async () => {
      const { store } = await harness().open();
      expect(await store.nextDueAt()).toBeUndefined();
      const later = new Date(Date.now() + 2 * HOUR);
      const sooner = new Date(Date.now() + HOUR);
      await store.transact((tx) => tx.schedule('next/later', later, effectMessage('n')));
      expect(
        (await store.nextDueAt())?.getTime(),
        'a store without a deadline order declares dueOrder: false',
      ).toBe(later.getTime());
      await store.transact((tx) => tx.schedule('next/sooner', sooner, effectMessage('n')));
      expect((await store.nextDueAt())?.getTime()).toBe(sooner.getTime());
      await store.transact((tx) => tx.cancelSchedule('next/sooner'));
      expect((await store.nextDueAt())?.getTime()).toBe(later.getTime());
      await store.transact((tx) => tx.cancelSchedule('next/later'));
      expect(await store.nextDueAt()).toBeUndefined();
    });
  } else {
    it('keeps no deadline order (dueOrder: false): no next due time; pages hold every schedule once, in key order', async () => {
      const { store } = await harness().open();
      await failInReverse(store, run);
      expect(await store.nextDueAt()).toBeUndefined();
      const keys = ['due/0', 'due/1', 'due/2', 'due/3', 'due/4'];
      expect((await allPages(store, { order: 'due', limit: 2 })).map((s) => s.key)).toEqual(keys);
      expect((await allPages(store, { limit: 2 })).map((s) => s.key)).toEqual(keys);
      expect(await store.countSchedules({ order: 'due' })).toBe(5);
    });
  }

  it('filters recurring and one-shot schedules in pages and counts', async () => {
    const { store } = await harness().open();
    const first = new Date(Date.now() + HOUR);
    await store.transact(async (tx) => {
      for (let i = 0; i < 3; i++)
        await tx.schedule(
          `mixed/every/${i}`,
          recurring(intervalFrom(HOUR, first), { startAt: first }),
          effectMessage(`every-${i}`),
        );
      for (let i = 0; i < 4; i++)
        await tx.schedule(`mixed/once/${i}`, new Date(first.getTime() + i), effectMessage(`once-${i}`));
    });
    const recurringKeys = (await allPages(store, { recurring: true, limit: 2 })).map((s) => s.key).sort();
    expect(recurringKeys).toEqual(['mixed/every/0', 'mixed/every/1', 'mixed/every/2']);
    const once = await allPages(store, { recurring: false, limit: 3 });
    expect(once.map((s) => s.key).sort()).toEqual([
      'mixed/once/0',
      'mixed/once/1',
      'mixed/once/2',
      'mixed/once/3',
    ]);
    expect(once.every((s) => s.recurrence === undefined)).toBe(true);
    expect(
      (await store.pageSchedules({ recurring: true })).items.every((s) => s.recurrence !== undefined),
    ).toBe(true);
    expect(await store.countSchedules({ recurring: true })).toBe(3);
    expect(await store.countSchedules({ recurring: false })).toBe(4);
    expect(await store.countSchedules({ recurring: false, prefix: 'mixed/every/' })).toBe(0);
    expect(await store.countSchedules()).toBe(7);
  });

  it('counts schedules up to a limit, with filters', async () => {
    const { store } = await harness().open();
    const at = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (let i = 0; i < 25; i++)
        await tx.schedule(
          `count/${i % 2 === 0 ? 'even' : 'odd'}/${i}`,
          new Date(at + i * 1000),
          effectMessage('c'),
        );
    });
    expect(await store.countSchedules()).toBe(25);
    expect(await store.countSchedules({ limit: 10 })).toBe(10);
    expect(await store.countSchedules({ limit: 25 })).toBe(25);
    expect(await store.countSchedules({ prefix: 'count/even/' })).toBe(13);
    expect(await store.countSchedules({ prefix: 'count/odd/', limit: 5 })).toBe(5);
    expect(await store.countSchedules({ prefix: 'count/none/' })).toBe(0);
    if (capabilities.dueOrder) expect(await store.countSchedules({ through: new Date(at + 9_000) })).toBe(10);
    await expect(store.countSchedules({ limit: 0 })).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
    });
  });

  it('tells the due backlog: how many are due now, up to a limit, and the earliest due time', async () => {
    const { store } = await harness().open();
    expect(await store.dueBacklog()).toEqual({ count: 0 });
    const now = Date.now();
    await store.transact(async (tx) => {
      for (let i = 1; i <= 3; i++)
        await tx.schedule(`backlog/due/${i}`, new Date(now - i * 60_000), effectMessage('b'));
      for (let i = 1; i <= 2; i++)
        await tx.schedule(`backlog/later/${i}`, new Date(now + i * HOUR), effectMessage('b'));
    });
    // A backend whose engine keeps the time counts a schedule once its timer fired: within moments.
    await waitFor('the three schedules due counted', async () => (await store.dueBacklog()).count === 3);
    const backlog = await store.dueBacklog();
    if (capabilities.dueOrder) expect(backlog.oldest?.getTime()).toBe(now - 3 * 60_000);
    expect((await store.dueBacklog({ limit: 2 })).count).toBe(2);
    // Cancelled or replaced by a later one: no longer due, whether or not its timer fired.
    await store.transact(async (tx) => {
      await tx.cancelSchedule('backlog/due/3');
      await tx.schedule('backlog/due/2', new Date(now + HOUR), effectMessage('b'));
    });
    expect(await store.dueBacklog()).toEqual({
      count: 1,
      ...(capabilities.dueOrder ? { oldest: new Date(now - 60_000) } : {}),
    });
    await expect(store.dueBacklog({ limit: 0 })).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'query.limit',
    });
  });

  it('counts dead letters up to a limit, under a prefix', async () => {
    const { store } = await harness().open();
    expect(await store.countDeadLetters()).toBe(0);
    await store.transact(async (tx) => {
      for (const key of ['gone/a', 'gone/b', 'gone/c', 'lost/d'])
        await tx.schedule(key, new Date(Date.now() - 1), effectMessage(key.replace('/', '-')));
    });
    run(
      new Dispatcher({
        store,
        logger: silentLogger,
        rescanInterval: 100,
        maxAttempts: 1,
        processor: async () => {
          throw new Error('never works');
        },
      }),
    );
    await waitFor('four dead letters', async () => (await store.countDeadLetters()) === 4);
    expect(await store.countDeadLetters({ prefix: 'gone/' })).toBe(3);
    expect(await store.countDeadLetters({ prefix: 'gone/', limit: 2 })).toBe(2);
    expect(await store.countDeadLetters({ prefix: 'none/' })).toBe(0);
    expect(await store.countSchedules()).toBe(0);
  });
}
