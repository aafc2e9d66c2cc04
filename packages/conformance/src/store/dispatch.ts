import {
  Dispatcher,
  type DispatcherOptions,
  ErrRetry,
  type Logger,
  type Processor,
  type Store,
} from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

const HOUR = 3_600_000;

type StartOptions = Partial<Omit<DispatcherOptions, 'store'>>;

/** A logger that remembers warnings and errors. */
function recordingLogger(): Logger & { complaints: string[] } {
  const complaints: string[] = [];
  return {
    complaints,
    debug() {},
    info() {},
    warn: (m) => complaints.push(`warn: ${m}`),
    error: (m) => complaints.push(`error: ${m}`),
  };
}

/** The processor the suite uses by default: one `effect.applied` event per committed delivery. */
const applyEffect: Processor = async (tx, message, { schedule }) => {
  await tx.exec(effects, message.aggregateId!, (_s, ag) =>
    ag.raise('effect.applied', { key: schedule.key, version: schedule.version }),
  );
};

/** Dispatcher delivery semantics: atomic consumption, retries, replacement, recovery, recurrence, concurrency. */
export function dispatcherTests({ harness, manyMessages = 1000 }: SuiteContext): void {
  const start = (store: Store<unknown>, options: StartOptions = {}) => {
    const dispatcher = new Dispatcher({
      store,
      ...(options.handlers ? {} : { processor: applyEffect }),
      rescanInterval: 100,
      retryDelay: 20,
      ...options,
    });
    harness().run(dispatcher);
    return dispatcher;
  };

  it('delivers a due message and commits the consumption with the processor’s writes', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('deliver/1', new Date(Date.now() - 1000), effectMessage('d1')));
    const { version } = (await store.loadSchedule('deliver/1'))!;
    start(store);
    await waitFor('the effect to commit', async () => (await appliedCount(store, 'd1')) === 1);
    await waitFor(
      'the schedule to be consumed',
      async () => (await store.loadSchedule('deliver/1')) === undefined,
    );
    const events = await store.loadEvents('d1');
    expect(events).toHaveLength(1);
    expect(events[0]?.data).toEqual({ key: 'deliver/1', version });
  });

  it('recovers schedules that fell due while no dispatcher ran', async () => {
    const { store } = await harness().open();
    const past = Date.now() - 10 * 60_000;
    await store.transact(async (tx) => {
      for (let i = 0; i < 20; i++)
        await tx.schedule(`recover/${i}`, new Date(past + i), effectMessage(`r${i}`));
    });
    start(store, { concurrency: 4 });
    await waitFor('all 20 to be delivered', async () => (await store.listSchedules()).length === 0);
    for (let i = 0; i < 20; i++) expect(await appliedCount(store, `r${i}`)).toBe(1);
  });

  it('never persists a failed attempt’s writes, keeps the schedule, counts attempts, and retries', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('flaky/1', new Date(Date.now() - 1), effectMessage('f1')));
    let calls = 0;
    const logger = recordingLogger();
    start(store, {
      logger,
      retryDelay: 30,
      processor: async (tx, message, context) => {
        calls++;
        await applyEffect(tx, message, context);
        await tx.schedule('flaky/side-effect', new Date(Date.now() + HOUR), effectMessage('side'));
        if (calls <= 2) throw new Error(`failure ${calls}`);
        expect(context.attempt).toBe(3);
        expect(context.schedule.attempts).toBe(2);
      },
    });
    await waitFor('the third attempt to commit', async () => (await appliedCount(store, 'f1')) === 1);
    expect(calls).toBe(3);
    const effectEvents = await store.loadEvents('f1');
    expect(effectEvents).toHaveLength(1);
    expect((await store.loadSchedule('flaky/side-effect'))?.message.aggregateId).toBe('side');
    expect(logger.complaints.filter((c) => c.startsWith('warn'))).toHaveLength(2);
  });

  it('records the failure on the schedule and moves its due time by retryDelay', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('failing/1', new Date(Date.now() - 1), effectMessage('x')));
    const { version } = (await store.loadSchedule('failing/1'))!;
    const before = Date.now();
    start(store, {
      retryDelay: HOUR,
      processor: async () => {
        throw new Error('always');
      },
    });
    const failed = await waitFor('the failure to be recorded', async () => {
      const s = await store.loadSchedule('failing/1');
      return s && s.attempts === 1 ? s : undefined;
    });
    expect(failed.version).toBe(version);
    expect(failed.dueAt.getTime()).toBeGreaterThanOrEqual(before + HOUR - 1000);
    expect(failed.at.getTime()).toBeLessThan(before);
  });

  it('retries quietly on ErrRetry (nothing logged, not counted as a failed attempt)', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('quiet/1', new Date(Date.now() - 1), effectMessage('q1')));
    const logger = recordingLogger();
    let calls = 0;
    start(store, {
      logger,
      maxAttempts: 2,
      retryDelay: 10,
      processor: async (tx, message, context) => {
        calls++;
        if (calls <= 3) throw ErrRetry;
        await applyEffect(tx, message, context);
      },
    });
    await waitFor('delivery after quiet retries', async () => (await appliedCount(store, 'q1')) === 1);
    expect(calls).toBe(4);
    expect(logger.complaints).toEqual([]);
  });

  it('dead-letters after maxAttempts, atomically with the dead-letter hook’s writes', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('poison/1', new Date(Date.now() - 1), effectMessage('p1')));
    const dead: { key: string; attempts: number }[] = [];
    let calls = 0;
    start(store, {
      maxAttempts: 3,
      retryDelay: 10,
      processor: async () => {
        calls++;
        throw new Error('poison');
      },
      onDeadLetter: async ({ schedule, attempts }, tx) => {
        dead.push({ key: schedule.key, attempts });
        await tx.exec(effects, 'dead-letters', (_s, ag) => ag.raise('effect.applied', { key: schedule.key }));
      },
    });
    await waitFor('the dead letter', async () => (await appliedCount(store, 'dead-letters')) === 1);
    expect(calls).toBe(3);
    expect(dead).toEqual([{ key: 'poison/1', attempts: 3 }]);
    expect(await store.loadSchedule('poison/1')).toBeUndefined();
  });

  it('routes messages by type to handlers, keeps messages without an aggregate, and dead-letters an unknown type at once', async () => {
    const { store } = await harness().open();
    await store.transact(async (tx) => {
      await tx.schedule('typed/plain', new Date(Date.now() - 2), { type: 'plain.note', data: { n: 1 } });
      await tx.schedule('typed/agg', new Date(Date.now() - 1), effectMessage('typed-agg'));
      await tx.schedule('typed/unknown', new Date(Date.now() - 1), { type: 'never.handled' });
    });
    expect((await store.loadSchedule('typed/plain'))?.message).toEqual({
      type: 'plain.note',
      data: { n: 1 },
    });
    const dead: { key: string; attempts: number; error: unknown }[] = [];
    const seen: unknown[] = [];
    start(store, {
      maxAttempts: 5,
      handlers: {
        'plain.note': async (_tx, message) => void seen.push(message),
        'effect.requested': applyEffect,
      },
      onDeadLetter: ({ schedule, attempts, error }) => void dead.push({ key: schedule.key, attempts, error }),
    });
    await waitFor('every message to be handled', async () => (await store.listSchedules()).length === 0);
    expect(seen).toEqual([{ type: 'plain.note', data: { n: 1 } }]);
    expect(await appliedCount(store, 'typed-agg')).toBe(1);
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ key: 'typed/unknown', attempts: 1 });
    expect((dead[0]!.error as { code: string }).code).toBe('DUETIME_UNRECOVERABLE');
  });

  it('delivers recurring work: the processor reschedules the same key', async () => {
    const { store } = await harness().open();
    await store.transact((tx) => tx.schedule('tick', new Date(Date.now() - 1), effectMessage('ticks')));
    const versions: number[] = [];
    start(store, {
      processor: async (tx, message, context) => {
        versions.push(context.schedule.version);
        await applyEffect(tx, message, context);
        if (versions.length < 3) await tx.schedule('tick', new Date(Date.now() + 20), message);
      },
    });
    await waitFor('three ticks', async () => (await appliedCount(store, 'ticks')) === 3);
    expect(versions).toHaveLength(3);
    expect(versions[0]! < versions[1]! && versions[1]! < versions[2]!).toBe(true);
    await waitFor(
      'the last tick to be consumed',
      async () => (await store.loadSchedule('tick')) === undefined,
    );
  });

  it('moves an active schedule earlier: rescheduling from far away to now delivers promptly', async () => {
    const { store } = await harness().open();
    await store.transact((tx) =>
      tx.schedule('move/1', new Date(Date.now() + HOUR), effectMessage('m1', { v: 1 })),
    );
    const first = (await store.loadSchedule('move/1'))!.version;
    start(store, { rescanInterval: 60_000 });
    expect(await appliedCount(store, 'm1')).toBe(0);
    await store.transact((tx) =>
      tx.schedule('move/1', new Date(Date.now() + 20), effectMessage('m1', { v: 2 })),
    );
    await waitFor('the moved schedule to be delivered', async () => (await appliedCount(store, 'm1')) === 1);
    const delivered = (await store.loadEvents('m1'))[0]?.data as { version: number };
    expect(delivered.version).toBeGreaterThan(first);
  });

  it('accepts deadlines decades away and decades ago: the past ones are delivered at once, the far one waits with its deadline exact', async () => {
    const { store } = await harness().open();
    const past = [new Date(0), new Date('1999-12-31T23:59:59.999Z')];
    const far = new Date('2199-01-01T00:00:00.001Z');
    await store.transact(async (tx) => {
      await tx.schedule('era/epoch', past[0]!, effectMessage('era-epoch'));
      await tx.schedule('era/1999', past[1]!, effectMessage('era-1999'));
      await tx.schedule('era/2199', far, effectMessage('era-2199'));
    });
    expect((await store.loadSchedule('era/epoch'))?.at).toEqual(past[0]);
    expect((await store.loadSchedule('era/2199'))?.at).toEqual(far);
    start(store);
    await waitFor(
      'the past deadlines to be delivered',
      async () =>
        (await appliedCount(store, 'era-epoch')) === 1 && (await appliedCount(store, 'era-1999')) === 1,
    );
    expect((await store.listSchedules()).map((s) => ({ key: s.key, at: s.at, dueAt: s.dueAt }))).toEqual([
      { key: 'era/2199', at: far, dueAt: far },
    ]);
    expect(await appliedCount(store, 'era-2199')).toBe(0);
    // Brought back to now, the far one is delivered too.
    await store.transact((tx) => tx.schedule('era/2199', new Date(), effectMessage('era-2199')));
    await waitFor(
      'the moved deadline to be delivered',
      async () => (await appliedCount(store, 'era-2199')) === 1,
    );
  });

  it('never delivers a cancelled schedule', async () => {
    const { store } = await harness().open();
    await store.transact(async (tx) => {
      await tx.schedule('cancel/1', new Date(Date.now() + 150), effectMessage('c1'));
      await tx.schedule('cancel/marker', new Date(Date.now() + 300), effectMessage('marker'));
    });
    start(store);
    await store.transact((tx) => tx.cancelSchedule('cancel/1'));
    await waitFor(
      'the later marker to be delivered',
      async () => (await appliedCount(store, 'marker')) === 1,
    );
    expect(await appliedCount(store, 'c1')).toBe(0);
  });

  it('delivers the new version when a schedule is replaced during delivery of the old one', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    await first.store.transact((tx) =>
      tx.schedule('replace/1', new Date(Date.now() - 1), effectMessage('rep', { v: 1 })),
    );
    const oldVersion = (await first.store.loadSchedule('replace/1'))!.version;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    start(first.store, {
      processor: async (tx, message, context) => {
        if ((message.data as { v: number }).v === 1) {
          entered();
          await gate;
        }
        await applyEffect(tx, message, context);
      },
    });
    await inside;
    const replacement = second.store.transact((tx) =>
      tx.schedule('replace/1', new Date(Date.now() - 1), effectMessage('rep', { v: 2 })),
    );
    // SQL backends make the replacement wait for the delivery's lock (it commits after the delivery);
    // elsewhere it commits now, before the delivery does.
    if (!harness().promised(first).sql) await replacement;
    release();
    await replacement;
    const newer = (e: { data?: unknown }) => (e.data as { version: number }).version > oldVersion;
    await waitFor('the new version to be delivered', async () =>
      (await first.store.loadEvents('rep')).some(newer),
    );
    await waitFor(
      'the key to be consumed',
      async () => (await first.store.loadSchedule('replace/1')) === undefined,
    );
    const events = await first.store.loadEvents('rep');
    // The old version's effect committed only if its consumption won the race; the new one is delivered exactly once.
    expect(events.filter(newer)).toHaveLength(1);
    expect(events.filter((e) => !newer(e)).length).toBeLessThanOrEqual(1);
    expect(newer(events.at(-1)!)).toBe(true);
  });

  const count = manyMessages;
  it(`commits each effect exactly once with four dispatchers processing ${count.toLocaleString('en-US')} messages`, async () => {
    const first = await harness().open();
    const instances = [first, ...(await Promise.all([1, 2, 3].map(() => harness().open(first.namespace))))];
    const now = Date.now();
    for (let batch = 0; batch < count; batch += 100) {
      await first.store.transact(async (tx) => {
        for (let i = batch; i < batch + 100; i++)
          await tx.schedule(`many/${i}`, new Date(now - count + i), effectMessage(`many-${i % 50}`, { i }));
      });
    }
    for (const instance of instances) start(instance.store, { concurrency: 4 });
    await waitFor(
      'all messages to be consumed',
      async () => (await first.store.pageSchedules({ limit: 1 })).items.length === 0,
      {
        timeoutMs: 120_000,
        intervalMs: 100,
      },
    );
    const delivered: number[] = [];
    for (let a = 0; a < 50; a++) {
      for (const e of await first.store.loadEvents(`many-${a}`)) {
        delivered.push(Number((e.data as { key: string }).key.slice('many/'.length)));
      }
    }
    expect(delivered).toHaveLength(count);
    expect(new Set(delivered).size).toBe(count);
  }, 180_000);

  it('wakes on commits from another instance (push channel or rescan) without wake()', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    start(first.store, { rescanInterval: 500 });
    await second.store.transact((tx) =>
      tx.schedule('remote/1', new Date(Date.now() + 30), effectMessage('remote')),
    );
    await waitFor(
      'the remote schedule to be delivered',
      async () => (await appliedCount(first.store, 'remote')) === 1,
    );
  });
}
