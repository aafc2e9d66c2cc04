import { ConflictError, Dispatcher, type DispatcherOptions, type Store } from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

const HOUR = 3_600_000;

type StartOptions = Partial<Omit<DispatcherOptions, 'store'>>;

/** Dead letters are kept in the store, listable, and can be retried or discarded; failures are visible. */
export function deadLetterTests({ harness }: SuiteContext): void {
  const start = (store: Store<unknown>, options: StartOptions) => {
    const dispatcher = new Dispatcher({ store, rescanInterval: 100, retryDelay: 10, ...options } as never);
    harness().run(dispatcher);
    return dispatcher as Dispatcher;
  };

  it('keeps the last error on a failing schedule and a dead letter in the store, with the hook’s writes', async () => {
    const { store } = await harness().open();
    await store.transact(async (tx) => {
      await tx.schedule('dl/slow', new Date(Date.now() - 1), effectMessage('dl-slow'));
      await tx.schedule('dl/1', new Date(Date.now() - 1), effectMessage('dl-1', { n: 1 }));
    });
    const { version } = (await store.loadSchedule('dl/1'))!;
    const calls = new Map<string, number>();
    const dispatcher = start(store, {
      maxAttempts: 3,
      retryDelay: (_attempt, error) => ((error as Error).message.startsWith('slow') ? HOUR : 10),
      processor: async (_tx, _message, { schedule }) => {
        const n = (calls.get(schedule.key) ?? 0) + 1;
        calls.set(schedule.key, n);
        throw new Error(`${schedule.key === 'dl/slow' ? 'slow' : 'broken'} ${n}`);
      },
      onDeadLetter: async ({ schedule }, tx) => {
        await tx.exec(effects, 'dl-hook', (_s, ag) => ag.raise('effect.applied', { key: schedule.key }));
      },
    });
    const failed = await waitFor('the slow one’s failure to be recorded', async () => {
      const s = await store.loadSchedule('dl/slow');
      return s?.attempts === 1 ? s : undefined;
    });
    expect(failed.lastError).toBe('Error: slow 1');
    expect(failed.dueAt.getTime()).toBeGreaterThan(Date.now() + HOUR - 60_000);
    await waitFor('the dead letter', async () => (await store.loadDeadLetter('dl/1')) !== undefined);
    const dead = (await store.loadDeadLetter('dl/1'))!;
    expect(dead).toMatchObject({ key: 'dl/1', version, attempts: 3, error: 'Error: broken 3' });
    expect(dead.message).toEqual(effectMessage('dl-1', { n: 1 }));
    expect(dead.at.getTime()).toBeLessThan(Date.now());
    expect(dead.deadAt.getTime()).toBeGreaterThan(Date.now() - 60_000);
    expect(await store.loadSchedule('dl/1')).toBeUndefined();
    expect(await appliedCount(store, 'dl-hook')).toBe(1);
    expect(dispatcher.snapshot().deadLettered).toBe(1);
  });

  it('lists dead letters by key page by page, retries one under its key or another, and discards one', async () => {
    const { store } = await harness().open();
    await store.transact(async (tx) => {
      for (const key of ['dead/a', 'dead/b', 'dead/c', 'other/z'])
        await tx.schedule(key, new Date(Date.now() - 1), effectMessage(key.replace('/', '-')));
    });
    let broken = true;
    start(store, {
      maxAttempts: 1,
      processor: async (tx, message, { schedule }) => {
        if (broken) throw new Error('down');
        await tx.exec(effects, message.aggregateId!, (_s, ag) =>
          ag.raise('effect.applied', { key: schedule.key }),
        );
      },
    });
    await waitFor('four dead letters', async () => (await store.pageDeadLetters()).items.length === 4);
    const first = await store.pageDeadLetters({ prefix: 'dead/', limit: 2 });
    expect(first.items.map((d) => d.key)).toEqual(['dead/a', 'dead/b']);
    expect(first.next).toBe('dead/b');
    const second = await store.pageDeadLetters({ prefix: 'dead/', limit: 2, after: first.next! });
    expect(second.items.map((d) => d.key)).toEqual(['dead/c']);
    expect(second.next).toBeUndefined();

    broken = false;
    expect(await store.transact((tx) => tx.retryDeadLetter('dead/a'))).toBe(true);
    expect(await store.loadDeadLetter('dead/a')).toBeUndefined();
    await waitFor(
      'the retried message to be delivered',
      async () => (await appliedCount(store, 'dead-a')) === 1,
    );
    expect(await store.loadSchedule('dead/a')).toBeUndefined();

    // The key is busy: retrying under it is refused, and commits nothing; under another key it works.
    await store.transact((tx) => tx.schedule('dead/b', new Date(Date.now() + HOUR), effectMessage('busy')));
    const refused = await store.transact((tx) => tx.retryDeadLetter('dead/b')).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConflictError);
    expect(await store.loadDeadLetter('dead/b')).toBeDefined();
    expect(await store.transact((tx) => tx.retryDeadLetter('dead/b', { asKey: 'dead/b-again' }))).toBe(true);
    await waitFor('the retry under another key', async () => (await appliedCount(store, 'dead-b')) === 1);
    expect((await store.loadSchedule('dead/b'))?.message).toEqual(effectMessage('busy'));

    expect(await store.transact((tx) => tx.discardDeadLetter('dead/c'))).toBe(true);
    expect(await store.transact((tx) => tx.discardDeadLetter('dead/c'))).toBe(false);
    expect(await store.transact((tx) => tx.retryDeadLetter('dead/none'))).toBe(false);
    expect((await store.pageDeadLetters()).items.map((d) => d.key)).toEqual(['other/z']);
  });
}
