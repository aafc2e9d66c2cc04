import { describe, expect, it } from 'vitest';
import {
  aggregate,
  createMemoryBackend,
  createStore,
  DeliveryInterruptedError,
  Dispatcher,
  ManualClock,
  MemoryDatabase,
  type Message,
  memoryAdapter,
  silentLogger,
} from '../../src/index.js';

const hits = aggregate({ type: 'hits', initial: 0, apply: { hit: (n: number) => n + 1 } });

/**
 * A message whose processing kills its process, simulated in one process: the processor marks every open
 * claim orphaned (what the death of the process leaves behind) and hangs until the "process" is dropped.
 */
describe('a message that crashes its process', () => {
  it('is dead-lettered after maxAttempts crashes while the messages claimed with it are delivered once', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const database = new MemoryDatabase({ clock });
    const first = createMemoryBackend({ database });
    const count = 200;
    await first.store.transact(async (tx) => {
      for (let i = 0; i < count; i++) {
        const message: Message = { type: i === 37 ? 'poison' : 'work', aggregateId: `item-${i}` };
        await tx.schedule(`batch/${String(i).padStart(3, '0')}`, new Date(clock.now() - count + i), message);
      }
    });
    const maxAttempts = 4;
    let restarts = 0;
    let poisonRuns = 0;
    const failures: string[] = [];
    for (let process = 0; process < 20; process++) {
      const backend = createMemoryBackend({ database });
      let crashed = false;
      const dispatcher = new Dispatcher({
        store: backend.store,
        maxAttempts,
        retryDelay: 10,
        drainTimeout: 0,
        batchSize: 64,
        processor: async (tx, message, { signal }) => {
          if (message.type === 'poison') {
            poisonRuns++;
            database.crash();
            crashed = true;
            await new Promise((_, reject) =>
              signal.addEventListener('abort', () => reject(new Error('gone'))),
            );
          }
          await tx.exec(hits, message.aggregateId!, (_state, ag) => ag.raise('hit'));
        },
      });
      dispatcher.on('failed', (e) => void failures.push(String((e.error as Error).name)));
      const done = dispatcher.run();
      for (let step = 0; step < 400 && !crashed; step++) {
        if ((await backend.store.countSchedules()) === 0) break;
        await clock.advance(5);
      }
      const draining = dispatcher.drain();
      await clock.advance(1); // drainTimeout 0: the hung processor is aborted at once
      await draining;
      await done;
      if (!crashed) break;
      restarts++;
    }
    expect(await first.store.countSchedules()).toBe(0);
    for (let i = 0; i < count; i++) {
      if (i === 37) continue;
      expect((await first.store.loadEvents(`item-${i}`)).length, `item-${i}`).toBe(1);
    }
    expect(await first.store.loadEvents('item-37')).toEqual([]);
    const dead = await first.store.loadDeadLetter('batch/037');
    expect(dead?.attempts).toBe(maxAttempts);
    expect(dead?.error).toMatch(/^DeliveryInterruptedError: the process delivering this message died/);
    // Every run of the poison was an attempt that crashed; the last crash is counted, and the message
    // dead-lettered, by the next claim (without running it again).
    expect(poisonRuns).toBe(maxAttempts);
    expect(restarts).toBeLessThanOrEqual(maxAttempts + Math.ceil(Math.log2(64)) + 2);
    expect(failures.filter((f) => f === DeliveryInterruptedError.name).length).toBeGreaterThan(0);
  });

  it('records the crash as an attempt even when nothing else is claimed with it', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const database = new MemoryDatabase({ clock });
    const backend = createMemoryBackend({ database });
    await backend.store.transact((tx) => tx.schedule('one', new Date(clock.now() - 1), { type: 't' }));
    const claim = await (async () => {
      // A "process" claims it and dies.
      const dispatcher = new Dispatcher({
        store: backend.store,
        drainTimeout: 0,
        processor: async (_tx, _m, { signal }) => {
          database.crash();
          await new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('gone'))));
        },
      });
      const done = dispatcher.run();
      await clock.advance(0);
      const draining = dispatcher.drain();
      await clock.advance(1);
      await draining;
      await done;
      return backend.store.loadSchedule('one');
    })();
    expect(claim?.attempts).toBe(0);
    const seen: { attempt: number; error: unknown }[] = [];
    const next = new Dispatcher({
      store: createMemoryBackend({ database }).store,
      retryDelay: 60_000,
      processor: async () => {},
    });
    next.on('failed', (e) => void seen.push({ attempt: e.attempt, error: e.error }));
    const done = next.run();
    await clock.advance(0);
    const after = await backend.store.loadSchedule('one');
    expect(after?.attempts).toBe(1);
    expect(after?.lastError).toMatch(/^DeliveryInterruptedError: /);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.error).toBeInstanceOf(DeliveryInterruptedError);
    await clock.advance(60_000);
    expect(await backend.store.loadSchedule('one')).toBeUndefined();
    const draining = next.drain();
    await clock.advance(1);
    await draining;
    await done;
  });

  it('delivers many schedules to be run alone when batches run at once and claims take time', async () => {
    const database = new MemoryDatabase();
    const adapter = memoryAdapter(database);
    const count = 54;
    const past = new Date(Date.now() - 1000);
    await createStore(adapter).transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(`alone/${i}`, past, { type: 'work', aggregateId: `item-${i}` });
    });
    // A process claimed them all in one batch and died.
    expect((await adapter.begin({ now: new Date(), limit: count })).claimed).toHaveLength(count);
    database.crash();
    // The next process claims over a network: each claim takes a few milliseconds, so a batch that sends
    // the ones to run alone back can finish while another batch's claim is on its way.
    const slow = new Proxy(adapter, {
      get(target, property) {
        const value = Reflect.get(target, property, target);
        if (property === 'begin')
          return async (claim?: { now: Date; limit: number }) => {
            if (claim) await new Promise((resolve) => setTimeout(resolve, 3));
            return target.begin(claim);
          };
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    // Each of the 54 interruptions is logged as a warning: not wanted in the test's output.
    const store = createStore(slow, { logger: silentLogger });
    const attempts = new Map<string, number[]>();
    const dispatcher = new Dispatcher({
      store,
      concurrency: 4,
      rescanInterval: 100,
      retryDelay: 20,
      processor: async (_tx, _m, { schedule, attempt }) => {
        attempts.set(schedule.key, [...(attempts.get(schedule.key) ?? []), attempt]);
      },
    });
    const controller = new AbortController();
    const running = dispatcher.run(controller.signal);
    try {
      // A deadline, not a timing claim: the schedules are delivered within a second or two; before a
      // claim on its way could end the running alone, none were within 30 s.
      const deadline = Date.now() + 30_000;
      while ((await store.countSchedules()) > 0 && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      controller.abort();
      await running;
    }
    expect(await store.countSchedules()).toBe(0);
    expect(attempts.size).toBe(count);
    // The dead process's claim counts as an attempt (recorded as interrupted); the next one runs, alone.
    for (const [key, runs] of attempts) expect(runs, key).toEqual([2]);
  }, 60_000);
});
