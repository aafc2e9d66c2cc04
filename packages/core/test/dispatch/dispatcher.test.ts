import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import {
  aggregate,
  ClosedError,
  ConflictError,
  createMemoryBackend,
  createStore,
  Dispatcher,
  InvalidArgumentError,
  ManualClock,
  MemoryDatabase,
  type Message,
  memoryAdapter,
  RetryError,
  type WatchEvent,
} from '../../src/index.js';

const counter = aggregate({ type: 'counter', initial: 0, apply: { hit: (n: number) => n + 1 } });
const msg = (id: string): Message => ({ type: 'hit', aggregateId: id });

function setup() {
  const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
  // The reference adapter under a store of its own, so a test can wrap the adapter's calls.
  const adapter = memoryAdapter(new MemoryDatabase({ clock }));
  return { clock, adapter, store: createStore(adapter, { clock, name: 'memory' }) };
}

/**
 * Makes the claims of `adapter` whose claimed keys `stalls` picks hang (after claiming) until `release()`;
 * `count` says how many did, `restore()` puts the adapter's own `begin` back.
 */
function stallClaims(adapter: ReturnType<typeof setup>['adapter'], stalls: (keys: string[]) => boolean) {
  const engine = adapter as { -readonly [K in keyof typeof adapter]: (typeof adapter)[K] };
  const original = adapter.begin.bind(adapter);
  let release = () => {};
  const stuck = new Promise<void>((resolve) => {
    release = resolve;
  });
  const stalled = {
    count: 0,
    release: () => release(),
    restore: () => {
      engine.begin = original;
    },
  };
  engine.begin = async (claim) => {
    const unit = await original(claim);
    if (claim && stalls((unit.claimed ?? []).map((c) => c.key))) {
      stalled.count++;
      await stuck;
    }
    return unit;
  };
  return stalled;
}

describe('Dispatcher', () => {
  it('rejects bad options with typed errors naming the option', () => {
    const { store } = setup();
    const processor = async () => {};
    const cases: [Record<string, unknown>, string][] = [
      [{ store, processor, rescanInterval: 0 }, 'options.rescanInterval'],
      [{ store, processor, rescanInterval: Number.NaN }, 'options.rescanInterval'],
      [{ store, processor, retryDelay: -1 }, 'options.retryDelay'],
      [{ store, processor, concurrency: 0 }, 'options.concurrency'],
      [{ store, processor, concurrency: 1.5 }, 'options.concurrency'],
      [{ store, processor, maxAttempts: 0 }, 'options.maxAttempts'],
      [{ store, processor, onDeadLetter: 'nope' }, 'options.onDeadLetter'],
      [{ store, processor: undefined }, 'options.processor'],
      [{ store: {}, processor }, 'options.store'],
      [{ store, processor, batchSize: 0 }, 'options.batchSize'],
      [{ store, processor, batchSize: -5 }, 'options.batchSize'],
      [{ store, processor, batchSize: 2.5 }, 'options.batchSize'],
      [{ store, processor, batchSize: 10_001 }, 'options.batchSize'],
      [{ store, processor, watchedRescanInterval: 0 }, 'options.watchedRescanInterval'],
      [{ store, processor, batchSize: '10' }, 'options.batchSize'],
      [{ store, processor, batchDuration: 0 }, 'options.batchDuration'],
      [{ store, processor, batchDuration: Number.POSITIVE_INFINITY }, 'options.batchDuration'],
      [{ store, processor, handlers: { a: processor } }, 'options.handlers'],
      [{ store, handlers: {} }, 'options.handlers'],
      [{ store, handlers: [] }, 'options.handlers'],
      [{ store, handlers: { 'order.expire': 'nope' } }, 'options.handlers["order.expire"]'],
      [{ store, processor, maxAttempts: Number.NaN }, 'options.maxAttempts'],
      [{ store, processor, pipeline: 'yes' }, 'options.pipeline'],
      [{ store, processor, pipeline: 1 }, 'options.pipeline'],
    ];
    for (const [options, field] of cases) {
      expect(() => new Dispatcher(options as never)).toThrow(InvalidArgumentError);
      try {
        new Dispatcher(options as never);
      } catch (error) {
        expect((error as InvalidArgumentError).field).toBe(field);
      }
    }
  });

  it('arms a timer for the earliest deadline: delivery is not quantised to the rescan interval', async () => {
    const { clock, store } = setup();
    const delivered: number[] = [];
    const dispatcher = new Dispatcher({
      store,
      rescanInterval: 60_000,
      processor: async () => void delivered.push(clock.now()),
    });
    const start = clock.now();
    await store.transact((tx) => tx.schedule('k', new Date(start + 10_250), msg('a')));
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(10_249);
    expect(delivered).toEqual([]);
    await clock.advance(1);
    expect(delivered).toEqual([start + 10_250]);
    ac.abort();
    await done;
  });

  it('wakes for a commit with an earlier deadline than the one it sleeps for', async () => {
    const { clock, store } = setup();
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      rescanInterval: 600_000,
      processor: async (_tx, m) => void delivered.push(m.aggregateId!),
    });
    const start = clock.now();
    await store.transact((tx) => tx.schedule('late', new Date(start + 300_000), msg('late')));
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(1000);
    await store.transact((tx) => tx.schedule('early', new Date(start + 2000), msg('early')));
    await clock.advance(1000);
    expect(delivered).toEqual(['early']);
    ac.abort();
    await done;
  });

  it('reads again at once when a schedule falls due while a page is being delivered (no pause)', async () => {
    const { clock, store } = setup();
    const start = clock.now();
    await store.transact(async (tx) => {
      await tx.schedule('first', new Date(start), msg('first'));
      await tx.schedule('second', new Date(start + 1), msg('second'));
    });
    const delivered: [string, number][] = [];
    const dispatcher = new Dispatcher({
      store,
      rescanInterval: 60_000,
      processor: async (_tx, m) => {
        delivered.push([m.aggregateId!, clock.now() - start]);
        // Time passes while the first is processed: the second falls due after its page was read.
        if (m.aggregateId === 'first') clock.set(start + 5);
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(0);
    expect(delivered).toEqual([
      ['first', 0],
      ['second', 5],
    ]);
    ac.abort();
    await done;
  });

  it('claims again at once when something falls due between the claim and looking for the next deadline', async () => {
    const { clock, adapter, store } = setup();
    const start = clock.now();
    await store.transact((tx) => tx.schedule('x', new Date(start + 10), msg('x')));
    const original = adapter.begin.bind(adapter);
    adapter.begin = async (claim) => {
      const unit = await original(claim);
      // The clock moves on between the claim and the next-deadline lookup (a timer firing a little early).
      if (claim?.now.getTime() === start + 9) clock.set(start + 10);
      return unit;
    };
    const delivered: number[] = [];
    const dispatcher = new Dispatcher({
      store,
      rescanInterval: 60_000,
      processor: async () => void delivered.push(clock.now()),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(0);
    clock.set(start + 9);
    dispatcher.wake();
    await clock.advance(0);
    expect(delivered).toEqual([start + 10]);
    ac.abort();
    await done;
  });

  it('sleeps until a deadline a store reports while a claim runs, instead of claiming again at once', async () => {
    // A store whose engine keeps the time reports its next held fire on every claim (as the NATS store
    // does). A report that arrives while a claim runs bounds the sleep after it; it used to start another
    // claim at once, which reported again: a loop of claims, one round trip each, until the fire was due.
    const { clock, adapter, store } = setup();
    const start = clock.now();
    await store.transact((tx) => tx.schedule('later', new Date(start + 1000), msg('later')));
    const engine = adapter as { -readonly [K in keyof typeof adapter]: (typeof adapter)[K] };
    engine.dueByWatch = true;
    let report: ((event: WatchEvent) => void) | undefined;
    engine.watch = (listener) => {
      report = listener;
      listener({ type: 'live' });
      return () => {};
    };
    const original = adapter.begin.bind(adapter);
    let claims = 0;
    engine.begin = async (claim) => {
      const unit = await original(claim);
      if (claim) {
        claims++;
        report?.({ type: 'change', earliest: new Date(start + 1000) });
        // A round trip: the loop, were it to spin, would spin on macrotasks and let this test's timer run.
        await new Promise((resolve) => setImmediate(resolve));
      }
      return unit;
    };
    const delivered: number[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async () => void delivered.push(clock.now()),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(claims).toBeLessThanOrEqual(2);
    await clock.advance(999);
    expect(delivered).toEqual([]);
    await clock.advance(1);
    for (let i = 0; i < 100 && delivered.length === 0; i++) await clock.advance(0);
    expect(delivered).toEqual([start + 1000]);
    ac.abort();
    await done;
  });

  it('claims a schedule falling due while a slow claim is under way, without waiting for it', async () => {
    // The claims of one dispatcher used to run one after another: a schedule due while a claim waited on
    // its store (a slow round trip) waited for it too, then for its own. Now a deadline that comes while
    // a claim is under way starts another claim beside it, while slots are free.
    const { clock, adapter, store } = setup();
    const start = clock.now();
    await store.transact(async (tx) => {
      await tx.schedule('first', new Date(start + 100), msg('first'));
      await tx.schedule('second', new Date(start + 200), msg('second'));
    });
    // A store whose engine keeps the time (as the NATS store): it reports each deadline it holds.
    const engine = adapter as { -readonly [K in keyof typeof adapter]: (typeof adapter)[K] };
    engine.dueByWatch = true;
    engine.watch = (listener) => {
      listener({ type: 'live' });
      listener({ type: 'change', earliest: new Date(start + 100) });
      listener({ type: 'change', earliest: new Date(start + 200) });
      return () => {};
    };
    // The claim that takes `first` hangs until released.
    const stalled = stallClaims(adapter, (keys) => keys.includes('first'));
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      concurrency: 4,
      processor: async (_tx, message) => void delivered.push(`${message.aggregateId}@${clock.now() - start}`),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(100);
    await expect.poll(() => stalled.count).toBe(1);
    await clock.advance(100);
    await expect.poll(() => delivered).toEqual(['second@200']);
    stalled.release();
    await expect.poll(() => delivered).toEqual(['second@200', 'first@200']);
    ac.abort();
    await done;
  });

  it('gives back what a claim took while it drains, and starts no batch for it', async () => {
    const { clock, adapter, store } = setup();
    await store.transact((tx) => tx.schedule('held', new Date(clock.now() - 1), msg('held')));
    const stalled = stallClaims(adapter, (keys) => keys.length > 0);
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async (_tx, m) => void delivered.push(String(m.aggregateId)),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await expect.poll(() => stalled.count).toBe(1);
    ac.abort();
    let stopped = false;
    void done.then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    // The drain waits for the claim under way.
    expect(stopped).toBe(false);
    stalled.release();
    await done;
    expect(delivered).toEqual([]);
    // Given back: the next dispatcher claims it at once.
    stalled.restore();
    const next = new Dispatcher({
      store,
      processor: async (_tx, m) => void delivered.push(String(m.aggregateId)),
    });
    const ac2 = new AbortController();
    const done2 = next.run(ac2.signal);
    await expect.poll(() => delivered).toEqual(['held']);
    ac2.abort();
    await done2;
  });

  it('never runs more processors at once than its concurrency', async () => {
    const { clock, store } = setup();
    await store.transact(async (tx) => {
      for (let i = 0; i < 40; i++) await tx.schedule(`c/${i}`, new Date(clock.now() - 1), msg(`c${i}`));
    });
    let running = 0;
    let peak = 0;
    let done = 0;
    const releases: (() => void)[] = [];
    const dispatcher = new Dispatcher({
      store,
      concurrency: 3,
      processor: async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((resolve) => releases.push(resolve));
        running--;
        done++;
      },
    });
    const ac = new AbortController();
    const finished = dispatcher.run(ac.signal);
    while (done < 40) {
      await clock.advance(1);
      for (const release of releases.splice(0)) release();
    }
    expect(peak).toBe(3);
    expect(dispatcher.snapshot()).toMatchObject({ delivered: 40, inFlight: 0, running: true });
    ac.abort();
    await finished;
    expect(dispatcher.snapshot().running).toBe(false);
  });

  it('claims due work batch by batch, never the whole backlog, and commits once per batch', async () => {
    const { clock, adapter, store } = setup();
    await store.transact(async (tx) => {
      for (let i = 0; i < 500; i++) await tx.schedule(`p/${i}`, new Date(clock.now() - 1), msg(`p${i % 10}`));
    });
    const limits: number[] = [];
    const original = adapter.begin.bind(adapter);
    adapter.begin = (claim) => {
      if (claim) limits.push(claim.limit);
      return original(claim);
    };
    // A budget no batch reaches, however loaded the machine: batch sizes are batchSize's alone (sizing
    // by processor time is the next test's).
    const dispatcher = new Dispatcher({
      store,
      concurrency: 4,
      batchSize: 20,
      batchDuration: 600_000,
      processor: async () => {},
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    while (dispatcher.snapshot().delivered < 500) await clock.advance(1);
    expect(Math.max(...limits)).toBe(20);
    // After the first batch (16, before any processor was timed), every batch is a full one.
    expect(dispatcher.snapshot().batches).toBeLessThanOrEqual(Math.ceil(500 / 20) + 2);
    ac.abort();
    await done;
  });

  it('claims fewer per batch when processors are slow, so a batch does not hold its commit for long', async () => {
    const { clock, adapter, store } = setup();
    await store.transact(async (tx) => {
      for (let i = 0; i < 30; i++) await tx.schedule(`slow/${i}`, new Date(clock.now() - 1), msg(`s${i}`));
    });
    const limits: number[] = [];
    const original = adapter.begin.bind(adapter);
    adapter.begin = (claim) => {
      if (claim) limits.push(claim.limit);
      return original(claim);
    };
    const dispatcher = new Dispatcher({
      store,
      batchSize: 100,
      batchDuration: 20,
      // Each processor takes about 10 ms of real time.
      processor: () => new Promise<void>((resolve) => setTimeout(resolve, 10)),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    while (dispatcher.snapshot().delivered < 30) await clock.advance(1);
    // The first batch takes a few; once processors are measured, batches hold about 20 ms of work.
    expect(limits[0]).toBeLessThanOrEqual(16);
    expect(Math.max(...limits.slice(1))).toBeLessThanOrEqual(2);
    ac.abort();
    await done;
  });

  it('drains: stops taking work, waits for processors in flight, then resolves run()', async () => {
    const { clock, store } = setup();
    await store.transact(async (tx) => {
      await tx.schedule('d/1', new Date(clock.now() - 1), msg('d1'));
      await tx.schedule('d/2', new Date(clock.now() + 5000), msg('d2'));
    });
    let release!: () => void;
    const dispatcher = new Dispatcher({
      store,
      processor: async (tx, m) => {
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        await tx.exec(counter, m.aggregateId!, (_s, ag) => ag.raise('hit'));
      },
    });
    const run = dispatcher.run();
    await clock.advance(1);
    const drained = dispatcher.drain();
    expect(dispatcher.snapshot()).toMatchObject({ draining: true, inFlight: 1 });
    release();
    await drained;
    await run;
    await clock.advance(10_000);
    expect((await store.loadEvents('d1')).length).toBe(1);
    expect(await store.loadSchedule('d/2')).toBeDefined();
    expect(() => dispatcher.run()).toThrow(ClosedError);
  });

  it('aborts the processors’ signal when the drain times out, and commits nothing they did after', async () => {
    const { clock, store } = setup();
    await store.transact((tx) => tx.schedule('stuck', new Date(clock.now() - 1), msg('stuck')));
    let signal: AbortSignal | undefined;
    const dispatcher = new Dispatcher({
      store,
      drainTimeout: 5000,
      processor: async (_tx, _m, context) => {
        signal = context.signal;
        await new Promise((_resolve, reject) =>
          context.signal.addEventListener('abort', () => reject(context.signal.reason)),
        );
      },
    });
    const run = dispatcher.run();
    await clock.advance(1);
    const drained = dispatcher.drain();
    await clock.advance(5000);
    await drained;
    await run;
    expect(signal?.aborted).toBe(true);
    expect(await store.loadSchedule('stuck')).toBeDefined();
  });

  it('uses the retry delay function with the attempt number, and a RetryError’s own delay', async () => {
    const { clock, store } = setup();
    await store.transact((tx) => tx.schedule('r', new Date(clock.now() - 1), msg('r')));
    const attempts: [number, number][] = [];
    let calls = 0;
    const start = clock.now();
    const dispatcher = new Dispatcher({
      store,
      retryDelay: (attempt) => attempt * 1000,
      processor: async (_tx, _m, context) => {
        calls++;
        attempts.push([context.attempt, clock.now() - start]);
        if (calls === 1) throw new Error('first');
        if (calls === 2) throw new Error('second');
        if (calls === 3) throw new RetryError({ delay: 7000 });
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(20_000);
    expect(attempts).toEqual([
      [1, 0],
      [2, 1000],
      [3, 3000],
      [3, 10_000],
    ]);
    ac.abort();
    await done;
  });

  it('leaves a batch pending when its commit fails, pauses, and delivers it later', async () => {
    const { clock, adapter, store } = setup();
    await store.transact((tx) => tx.schedule('f', new Date(clock.now() - 1), msg('f')));
    const commit = adapter.commit.bind(adapter);
    let outage = true;
    adapter.commit = async (unit, changes) => {
      if (outage && changes.settlements.length > 0) {
        await adapter.rollback(unit);
        throw new Error('backend unreachable');
      }
      return commit(unit, changes);
    };
    let calls = 0;
    const warnings: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async () => void calls++,
      logger: { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(0);
    expect(calls).toBe(1);
    expect(warnings).toContain('a delivery batch failed; its schedules stay pending');
    expect((await store.loadSchedule('f'))?.attempts).toBe(0);
    // Paused, not spinning on the failing backend.
    await clock.advance(40);
    expect(calls).toBe(1);
    outage = false;
    await clock.advance(1000);
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(await store.loadSchedule('f')).toBeUndefined();
    expect(dispatcher.snapshot().delivered).toBe(1);
    ac.abort();
    await done;
  });

  it('leaves no listener on a long-lived signal once stopped by drain() (found by the reliability suite)', async () => {
    const { store } = setup();
    const shutdown = new AbortController();
    for (let i = 0; i < 20; i++) {
      const dispatcher = new Dispatcher({ store, processor: async () => {} });
      const done = dispatcher.run(shutdown.signal);
      await dispatcher.drain();
      await done;
    }
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    // Still stopped by the signal itself.
    const dispatcher = new Dispatcher({ store, processor: async () => {} });
    const done = dispatcher.run(shutdown.signal);
    shutdown.abort();
    await done;
    expect(dispatcher.snapshot().running).toBe(false);
  });

  it('keeps running when the backend fails a scan, and recovers', async () => {
    const { clock, adapter, store } = setup();
    await store.transact((tx) => tx.schedule('s', new Date(clock.now() - 1), msg('s')));
    const original = adapter.begin.bind(adapter);
    let failures = 3;
    adapter.begin = async (claim) => {
      if (claim && failures-- > 0) throw new Error('connection reset');
      return original(claim);
    };
    const warnings: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async () => {},
      logger: { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(5000);
    expect(dispatcher.snapshot().delivered).toBe(1);
    expect(warnings.filter((w) => w.includes('scan failed'))).toHaveLength(3);
    ac.abort();
    await done;
  });
});

describe('Store.transact', () => {
  it('re-runs on aggregate conflicts and reports an exhausted conflict as a ConflictError, committing nothing', async () => {
    const database = new MemoryDatabase();
    const first = createMemoryBackend({ database });
    const second = createMemoryBackend({ database });
    let runs = 0;
    await expect(
      first.store.transact(
        async (tx) => {
          runs++;
          await tx.exec(counter, 'race', () => {});
          await second.store.transact((other) => other.exec(counter, 'race', (_s, ag) => ag.raise('hit')));
          await tx.exec(counter, 'race', (_s, ag) => ag.raise('hit'));
          await tx.schedule('race/loser', new Date(), msg('race'));
        },
        { maxRetries: 2 },
      ),
    ).rejects.toBeInstanceOf(ConflictError);
    expect(runs).toBe(3);
    expect((await first.store.loadEvents('race')).length).toBe(3);
    expect(await first.store.loadSchedule('race/loser')).toBeUndefined();
  });

  it('refuses to be used after close, and a transaction after it ended', async () => {
    const backend = createMemoryBackend();
    const store = backend.store;
    let leaked: Parameters<Parameters<typeof store.transact>[0]>[0] | undefined;
    await store.transact((tx) => {
      leaked = tx;
    });
    await expect(leaked!.schedule('k', new Date(), msg('x'))).rejects.toBeInstanceOf(ClosedError);
    await backend.close();
    await expect(store.transact(() => {})).rejects.toBeInstanceOf(ClosedError);
  });
});
