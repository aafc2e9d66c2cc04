import { Dispatcher, type DispatcherOptions, type Processor, type Store } from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

const HOUR = 3_600_000;
/** How far ahead the ten schedules of one batch fall due (see `scheduleTen`). */
const TEN_DUE_IN_MS = 300;

type StartOptions = Partial<Omit<DispatcherOptions, 'store'>>;

/**
 * Delivery batches: one backend transaction delivers a page of due schedules, and each message keeps its
 * own atomicity inside it.
 */
export function batchTests({ harness, sql }: SuiteContext): void {
  const start = (store: Store<unknown>, options: StartOptions) => {
    const dispatcher = new Dispatcher({ store, rescanInterval: 100, retryDelay: HOUR, ...options } as never);
    harness().run(dispatcher);
    return dispatcher as Dispatcher;
  };

  /**
   * Ten schedules `batch/0` … `batch/9` (each for the effects aggregate `b<i>`), all due at one instant a
   * moment ahead, so that the first claim finds all ten due together: a store whose engine hands schedules
   * out as its timers fire (NATS) has fired all ten by then. Due in the past, they fired as the commit
   * landed, one by one, and a claim made meanwhile on a busy server took only the first few.
   */
  const scheduleTen = async (store: Store<unknown>) => {
    const at = new Date(Date.now() + TEN_DUE_IN_MS);
    await store.transact(async (tx) => {
      for (let i = 0; i < 10; i++) await tx.schedule(`batch/${i}`, at, effectMessage(`b${i}`));
    });
  };

  it('commits a batch whose one processor throws: the others’ effects, and exactly that one’s failure', async () => {
    const { store } = await harness().open();
    await scheduleTen(store);
    const failing = (await store.loadSchedule('batch/4'))!;
    const dispatcher = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      processor: async (tx, message, { schedule }) => {
        await tx.exec(effects, message.aggregateId!, (_s, ag) =>
          ag.raise('effect.applied', { key: schedule.key }),
        );
        await tx.schedule(`side/${schedule.key}`, new Date(Date.now() + HOUR), effectMessage('side'));
        if (schedule.key === 'batch/4') throw new Error('boom in batch/4');
      },
    });
    await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    expect(dispatcher.snapshot()).toMatchObject({ batches: 1, delivered: 9, failed: 1 });
    for (let i = 0; i < 10; i++) {
      expect(await appliedCount(store, `b${i}`), `effect of batch/${i}`).toBe(i === 4 ? 0 : 1);
      const side = await store.loadSchedule(`side/batch/${i}`);
      expect(side === undefined, `side schedule of batch/${i}`).toBe(i === 4);
    }
    const left = await store.listSchedules(new Date(Date.now() + 2 * HOUR));
    expect(left.filter((s) => s.key.startsWith('batch/')).map((s) => s.key)).toEqual(['batch/4']);
    const recorded = (await store.loadSchedule('batch/4'))!;
    expect(recorded).toMatchObject({ version: failing.version, attempts: 1 });
    expect(recorded.dueAt.getTime()).toBeGreaterThan(Date.now() + HOUR - 60_000);
  });

  it('pipeline: true: every effect of a batch once, and a throwing processor’s failure against it alone', async () => {
    const { store } = await harness().open();
    await scheduleTen(store);
    const runs = new Map<string, number>();
    let running = 0;
    let most = 0;
    const dispatcher = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      pipeline: true,
      processor: async (tx, message, { schedule }) => {
        runs.set(schedule.key, (runs.get(schedule.key) ?? 0) + 1);
        running++;
        most = Math.max(most, running);
        try {
          await tx.exec(effects, message.aggregateId!, (_s, ag) =>
            ag.raise('effect.applied', { key: schedule.key }),
          );
          await tx.schedule(`side/${schedule.key}`, new Date(Date.now() + HOUR), effectMessage('side'));
          if (schedule.key === 'batch/4') throw new Error('boom in batch/4');
        } finally {
          running--;
        }
      },
    });
    await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    expect(dispatcher.snapshot()).toMatchObject({ batches: 1, delivered: 9, failed: 1 });
    for (let i = 0; i < 10; i++) {
      expect(await appliedCount(store, `b${i}`), `effect of batch/${i}`).toBe(i === 4 ? 0 : 1);
      const side = await store.loadSchedule(`side/batch/${i}`);
      expect(side === undefined, `side schedule of batch/${i}`).toBe(i === 4);
    }
    const recorded = (await store.loadSchedule('batch/4'))!;
    expect(recorded.attempts).toBe(1);
    expect(recorded.lastError).toContain('boom in batch/4');
    // Where the backend runs processors at once, the group ran, failed, and ran again one by one: each
    // processor twice. Elsewhere they ran one by one, once each.
    const together = most > 1;
    for (let i = 0; i < 10; i++) expect(runs.get(`batch/${i}`), `runs of batch/${i}`).toBe(together ? 2 : 1);
  });

  it('pipeline: true with processors slower than the batch’s budget: a failure is recorded and the others still commit', async () => {
    const { store } = await harness().open();
    await scheduleTen(store);
    const dispatcher = start(store, {
      batchSize: 10,
      // Shorter than one processor: a group that failed has spent the budget before the run one by one.
      batchDuration: 5,
      pipeline: true,
      processor: async (tx, message, { schedule }) => {
        await new Promise((resolve) => setTimeout(resolve, 20));
        await tx.exec(effects, message.aggregateId!, (_s, ag) =>
          ag.raise('effect.applied', { key: schedule.key }),
        );
        if (schedule.key === 'batch/6') throw new Error('boom in batch/6');
      },
    });
    await waitFor(
      'nine deliveries and one failure',
      () => dispatcher.snapshot().delivered >= 9 && dispatcher.snapshot().failed >= 1,
      { timeoutMs: 20_000 },
    );
    expect(dispatcher.snapshot()).toMatchObject({ delivered: 9, failed: 1 });
    for (let i = 0; i < 10; i++)
      expect(await appliedCount(store, `b${i}`), `effect of batch/${i}`).toBe(i === 6 ? 0 : 1);
    expect((await store.loadSchedule('batch/6'))?.attempts).toBe(1);
  });

  it('records a failure when a processor throws something that is not an Error, or returns no promise', async () => {
    const { store } = await harness().open();
    await scheduleTen(store);
    const dispatcher = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      processor: ((_tx: unknown, _message: unknown, { schedule }: { schedule: { key: string } }) => {
        if (schedule.key === 'batch/2') throw 'a string';
        if (schedule.key === 'batch/3')
          return Promise.reject(Object.assign(Object.create(null), { reason: 'no prototype' }));
        return undefined;
      }) as never,
    });
    // All ten settled, in one batch or more (a store may hand out a delivery's due schedules a due second at
    // a time, and the ten may straddle two).
    await waitFor('the ten to be settled', () => {
      const { delivered, failed } = dispatcher.snapshot();
      return delivered + failed >= 10;
    });
    expect(dispatcher.snapshot()).toMatchObject({ delivered: 8, failed: 2 });
    expect((await store.loadSchedule('batch/2'))?.attempts).toBe(1);
    expect((await store.loadSchedule('batch/3'))?.attempts).toBe(1);
    expect(await store.loadSchedule('batch/5')).toBeUndefined();
  });

  it('delivers a later part after an earlier one rescheduled its own key, keeping the newer version', async () => {
    const { store } = await harness().open();
    await scheduleTen(store);
    const dispatcher = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      processor: async (tx, message, { schedule }) => {
        await tx.exec(effects, message.aggregateId!, (_s, ag) =>
          ag.raise('effect.applied', { key: schedule.key }),
        );
        // Recurring work: the processor of batch/0 puts its own key again, and that of batch/1 too but then fails.
        if (schedule.key === 'batch/0' || schedule.key === 'batch/1')
          await tx.schedule(schedule.key, new Date(Date.now() + HOUR), message);
        if (schedule.key === 'batch/1') throw new Error('after rescheduling');
      },
    });
    await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    const again = (await store.loadSchedule('batch/0'))!;
    expect(again.at.getTime()).toBeGreaterThan(Date.now() + HOUR - 60_000);
    expect(again.attempts).toBe(0);
    const failed = (await store.loadSchedule('batch/1'))!;
    expect(failed.at.getTime()).toBeLessThan(Date.now());
    expect(failed.attempts).toBe(1);
    expect(await appliedCount(store, 'b0')).toBe(1);
    expect(await appliedCount(store, 'b1')).toBe(0);
  });

  it('never runs one schedule in two dispatchers at once when claims are exclusive; each effect commits once', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const exclusive = harness().promised(first).exclusiveClaims;
    const count = 120;
    await first.store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(`claim/${i}`, new Date(Date.now() - count + i), effectMessage(`claim-${i}`, { i }));
    });
    const running = new Set<string>();
    const runs = new Map<string, number>();
    let overlaps = 0;
    const processor: Processor = async (tx, message, { schedule }) => {
      if (running.has(schedule.key)) overlaps++;
      running.add(schedule.key);
      runs.set(schedule.key, (runs.get(schedule.key) ?? 0) + 1);
      try {
        // Long enough for the other dispatcher to try the same head of the due index.
        await new Promise((resolve) => setTimeout(resolve, 2));
        await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied', message.data));
      } finally {
        running.delete(schedule.key);
      }
    };
    for (const { store } of [first, second]) start(store, { concurrency: 3, batchSize: 8, processor });
    await waitFor(
      'every schedule to be consumed',
      async () => (await first.store.listSchedules()).length === 0,
      {
        timeoutMs: 60_000,
      },
    );
    let total = 0;
    // One aggregate per schedule: no optimistic conflict between parts, so no part has to run again.
    for (let a = 0; a < count; a++) total += await appliedCount(first.store, `claim-${a}`);
    expect(total).toBe(count);
    if (exclusive) {
      expect(overlaps, 'processors that ran while another dispatcher ran the same schedule').toBe(0);
      expect(
        [...runs.values()].every((n) => n === 1),
        'every processor ran exactly once',
      ).toBe(true);
    }
  }, 90_000);

  it('stores a message’s trace context verbatim, tells of it after the commit, and hands processors the message without it', async () => {
    const { store } = await harness().open();
    const trace = {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      tracestate: 'duetime=conformance',
    };
    await store.transact(async (tx) => {
      await tx.schedule('traced/ok', new Date(Date.now() - 1000), { type: 'traced', data: { n: 1 }, trace });
      await tx.schedule('traced/dead', new Date(Date.now() - 1000), { type: 'doomed', trace });
    });
    expect((await store.loadSchedule('traced/ok'))?.message).toEqual({
      type: 'traced',
      data: { n: 1 },
      trace,
    });
    const given: unknown[] = [];
    const delivered: unknown[] = [];
    const dispatcher = start(store, {
      maxAttempts: 1,
      processor: async (_tx, message) => {
        given.push(message);
        if (message.type === 'doomed') throw new Error('doomed');
      },
    });
    dispatcher.on('delivered', (event) => void delivered.push(event.schedule.message));
    await waitFor(
      'both delivered or dead-lettered',
      async () => (await store.listSchedules()).length === 0 && delivered.length === 1,
    );
    expect(given).toContainEqual({ type: 'traced', data: { n: 1 } });
    expect(given).toContainEqual({ type: 'doomed' });
    expect(delivered).toEqual([{ type: 'traced', data: { n: 1 }, trace }]);
    expect((await store.loadDeadLetter('traced/dead'))?.message).toEqual({ type: 'doomed', trace });
  });

  // Registered only for targets with a SQL probe; a backend that declares `sql` without one fails the
  // suite's first test.
  const probe = sql;
  if (!probe) return;
  it('rolls a processor’s own SQL back with its part, and commits it with the others', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    await scheduleTen(store);
    const dispatcher = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      processor: async (tx, _message, { schedule }) => {
        if (schedule.key === 'batch/7') return; // writes nothing: takes no savepoint
        await probe.write(tx.sql, schedule.key);
        if (schedule.key === 'batch/3' || schedule.key === 'batch/9') throw new Error('after writing');
      },
    });
    await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    expect(dispatcher.snapshot()).toMatchObject({ batches: 1, delivered: 8, failed: 2 });
    expect((await probe.rows(backend)).sort()).toEqual([0, 1, 2, 4, 5, 6, 8].map((i) => `batch/${i}`).sort());
    expect((await store.loadSchedule('batch/3'))?.attempts).toBe(1);
    expect(await store.loadSchedule('batch/7')).toBeUndefined();
  });

  it('pipeline: true: processors’ SQL commits with the batch when all succeed, and none of a failed group stays', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const count = 40;
    await store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(`pipe/${i}`, new Date(Date.now() - 1000 + i), effectMessage(`p${i}`));
    });
    const delivered: string[] = [];
    const dispatcher = start(store, {
      batchSize: count,
      batchDuration: 600_000,
      pipeline: true,
      processor: async (tx, _message, { schedule }) => {
        await probe.write(tx.sql, schedule.key);
      },
    });
    dispatcher.on('delivered', ({ schedule }) => delivered.push(schedule.key));
    await waitFor('every schedule delivered', () => dispatcher.snapshot().delivered >= count);
    expect(dispatcher.snapshot()).toMatchObject({ delivered: count, failed: 0 });
    const expected = Array.from({ length: count }, (_, i) => `pipe/${i}`).sort();
    expect((await probe.rows(backend)).sort()).toEqual(expected);
    expect(delivered.sort()).toEqual(expected);
    await dispatcher.drain();

    // One processor throws after its write: the group is undone and run again one by one; events tell
    // of the committed outcome only.
    await scheduleTen(store);
    const events: string[] = [];
    const broken = start(store, {
      batchSize: 10,
      batchDuration: 600_000,
      pipeline: true,
      processor: async (tx, _message, { schedule }) => {
        await probe.write(tx.sql, schedule.key);
        if (schedule.key === 'batch/6') throw new Error('after writing');
      },
    });
    broken.on('failed', ({ schedule }) => events.push(`failed ${schedule.key}`));
    broken.on('delivered', ({ schedule }) => events.push(`delivered ${schedule.key}`));
    await waitFor('the second batch to commit', () => broken.snapshot().batches >= 1);
    expect(broken.snapshot()).toMatchObject({ batches: 1, delivered: 9, failed: 1 });
    const rows = (await probe.rows(backend)).filter((r) => r.startsWith('batch/'));
    expect(rows.sort()).toEqual([0, 1, 2, 3, 4, 5, 7, 8, 9].map((i) => `batch/${i}`).sort());
    expect(events.sort()).toEqual(
      Array.from({ length: 10 }, (_, i) => (i === 6 ? 'failed batch/6' : `delivered batch/${i}`)).sort(),
    );
    expect((await store.loadSchedule('batch/6'))?.attempts).toBe(1);
  });
}
