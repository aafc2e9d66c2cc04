import { waitFor } from '@duetime/conformance';
import { describe, expect, it } from 'vitest';
import {
  createMemoryBackend,
  createStore,
  type DeliveryEvent,
  Dispatcher,
  type DispatcherEvents,
  ErrRetry,
  every,
  InvalidArgumentError,
  type Logger,
  ManualClock,
  MemoryDatabase,
  memoryAdapter,
  Registry,
  Scheduler,
  type SchedulerEvents,
  UnrecoverableError,
} from '../../src/index.js';

function capture(): Logger & { warnings: { message: string; fields?: Record<string, unknown> }[] } {
  const warnings: { message: string; fields?: Record<string, unknown> }[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn(message, fields) {
      warnings.push({ message, ...(fields ? { fields } : {}) });
    },
    error() {},
  };
}

function setup() {
  const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
  const logger = capture();
  const backend = createMemoryBackend({ clock, logger });
  return { clock, logger, backend, store: backend.store };
}

describe('Dispatcher events', () => {
  it('tells of each outcome once, after the commit, with the schedule, attempt, error and retry time', async () => {
    const { clock, store, logger } = setup();
    const seen: { name: keyof DispatcherEvents; key: string; attempt: number; event: DeliveryEvent }[] = [];
    const dispatcher = new Dispatcher({
      store,
      logger,
      retryDelay: 1000,
      maxAttempts: 2,
      processor: async (_tx, message) => {
        if (message.type === 'ok') return;
        if (message.type === 'quiet') throw ErrRetry;
        if (message.type === 'broken') throw new UnrecoverableError('bad payload');
        throw new Error(`boom ${message.type}`);
      },
    });
    for (const name of ['delivered', 'failed', 'retried', 'deadLettered', 'skipped', 'missed'] as const)
      dispatcher.on(name, (event) => {
        seen.push({ name, key: event.schedule.key, attempt: event.attempt, event });
      });
    const now = new Date(clock.now());
    await store.transact(async (tx) => {
      await tx.schedule('a/ok', now, { type: 'ok', data: { n: 1 } });
      await tx.schedule('a/fail', now, { type: 'fail' });
      await tx.schedule('a/quiet', now, { type: 'quiet' });
      await tx.schedule('a/broken', now, { type: 'broken' });
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('four events', () => seen.length >= 4);
    const byKey = Object.fromEntries(seen.map((s) => [s.key, s]));
    expect(byKey['a/ok']?.name).toBe('delivered');
    expect(byKey['a/ok']?.event.schedule.message).toEqual({ type: 'ok', data: { n: 1 } });
    expect(byKey['a/ok']?.event.latenessMs).toBe(0);
    expect(byKey['a/fail']?.name).toBe('failed');
    const failed = byKey['a/fail']?.event as DispatcherEvents['failed'];
    expect((failed.error as Error).message).toBe('boom fail');
    expect(failed.retryAt.getTime()).toBe(clock.now() + 1000);
    expect(byKey['a/quiet']?.name).toBe('retried');
    expect(byKey['a/broken']?.name).toBe('deadLettered');
    expect((byKey['a/broken']?.event as DispatcherEvents['deadLettered'] | undefined)?.attempts).toBe(1);
    // The second attempt of a/fail reaches maxAttempts: dead-lettered, attempt 2.
    await clock.advance(1000);
    await waitFor('the dead letter of a/fail', () =>
      seen.find((s) => s.key === 'a/fail' && s.name === 'deadLettered'),
    );
    expect(seen.find((s) => s.key === 'a/fail' && s.name === 'deadLettered')?.attempt).toBe(2);
    expect(dispatcher.snapshot().deadLettered).toBe(2);
    ac.abort();
    await done;
    expect(logger.warnings.filter((w) => w.message.includes('listener'))).toEqual([]);
  });

  it('keeps delivering when a listener throws or rejects, and logs it; on() returns an unsubscribe', async () => {
    const { store, logger } = setup();
    const processed: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      logger,
      processor: async (_tx, m) => void processed.push(m.type),
    });
    const heard: string[] = [];
    dispatcher.on('delivered', () => {
      throw new Error('listener bug');
    });
    dispatcher.on('delivered', async () => {
      throw new Error('async listener bug');
    });
    const off = dispatcher.on('delivered', (e) => void heard.push(e.schedule.key));
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await store.transact((tx) => tx.schedule('k1', new Date(store.clock.now()), { type: 'one' }));
    await waitFor('k1 heard', () => heard.includes('k1'));
    off();
    off();
    await store.transact((tx) => tx.schedule('k2', new Date(store.clock.now()), { type: 'two' }));
    await waitFor('two processed', () => processed.includes('two'));
    await waitFor(
      'the listener failures logged',
      () => logger.warnings.filter((w) => w.message.includes('delivered listener threw')).length >= 4,
    );
    ac.abort();
    await done;
    expect(heard).toEqual(['k1']);
    expect(processed).toEqual(['one', 'two']);
    const errors = logger.warnings.map((w) => (w.fields?.error as Error | undefined)?.message);
    expect(errors).toContain('listener bug');
    expect(errors).toContain('async listener bug');
  });

  it('tells of nothing when the batch commit fails: the delivery was rolled back and stays pending', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const logger = capture();
    const adapter = memoryAdapter(new MemoryDatabase({ clock }));
    let failCommits = 1;
    const commit = adapter.commit.bind(adapter);
    adapter.commit = async (unit, changes) => {
      if (changes.settlements.length > 0 && failCommits-- > 0) {
        await adapter.rollback(unit);
        throw new Error('disk full');
      }
      return commit(unit, changes);
    };
    const store = createStore(adapter, { clock, logger });
    const delivered: string[] = [];
    let runs = 0;
    const dispatcher = new Dispatcher({ store, logger, processor: async () => void runs++ });
    dispatcher.on('delivered', (e) => void delivered.push(e.schedule.key));
    await store.transact((tx) => tx.schedule('k', new Date(clock.now()), { type: 't' }));
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the failed batch logged', () =>
      logger.warnings.some((w) => w.message.includes('a delivery batch failed')),
    );
    expect(runs).toBe(1);
    expect(delivered).toEqual([]);
    expect(await store.loadSchedule('k')).toBeDefined();
    await clock.advance(1000);
    await waitFor('the second delivery', () => delivered.length === 1);
    expect(runs).toBe(2);
    expect(await store.loadSchedule('k')).toBeUndefined();
    ac.abort();
    await done;
  });

  it('tells of a stale version as skipped: the schedule was replaced while its delivery ran', async () => {
    const { store } = setup();
    const skipped: { key: string; version: number; reason: string }[] = [];
    const delivered: number[] = [];
    let replaced = false;
    const dispatcher = new Dispatcher({
      store,
      processor: async (_tx, _message, { schedule }) => {
        if (!replaced) {
          replaced = true;
          // Another transaction replaces the key while this delivery is still open.
          await store.transact((tx) => tx.schedule('k', new Date(store.clock.now()), { type: 'second' }));
        } else delivered.push(schedule.version);
      },
    });
    dispatcher.on(
      'skipped',
      (e) => void skipped.push({ key: e.schedule.key, version: e.schedule.version, reason: e.reason }),
    );
    await store.transact((tx) => tx.schedule('k', new Date(store.clock.now()), { type: 'first' }));
    const first = (await store.loadSchedule('k'))?.version;
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the replacement delivered', () => delivered.length === 1);
    ac.abort();
    await done;
    expect(skipped).toEqual([{ key: 'k', version: first, reason: 'stale' }]);
    expect(delivered[0]).toBeGreaterThan(first ?? 0);
  });

  it('refuses unknown event names and listeners that are not functions, naming them', () => {
    const { store } = setup();
    const dispatcher = new Dispatcher({ store, processor: async () => {} });
    expect(() => dispatcher.on('delivred' as never, () => {})).toThrow(InvalidArgumentError);
    expect(() => dispatcher.on('delivred' as never, () => {})).toThrow(/delivered, failed/);
    expect(() => dispatcher.on('delivered', 'nope' as never)).toThrow(/listener/);
    expect(() => new Dispatcher({ store, processor: async () => {}, telemetry: 'on' as never })).toThrow(
      /options.telemetry/,
    );
  });

  it('once() hears one event', async () => {
    const { store } = setup();
    const dispatcher = new Dispatcher({ store, processor: async () => {} });
    const heard: string[] = [];
    dispatcher.once('delivered', (e) => void heard.push(e.schedule.key));
    const all: string[] = [];
    dispatcher.on('delivered', (e) => void all.push(e.schedule.key));
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await store.transact(async (tx) => {
      await tx.schedule('a', new Date(store.clock.now()), { type: 't' });
      await tx.schedule('b', new Date(store.clock.now()), { type: 't' });
    });
    await waitFor('both delivered', () => all.length === 2);
    ac.abort();
    await done;
    expect(heard).toEqual(['a']);
  });
});

describe('Scheduler events', () => {
  it('tells of leadership with its epoch, and of each occurrence admitted and finished with its record', async () => {
    const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 59, 500));
    const backend = createMemoryBackend({ clock });
    const heard: { name: keyof SchedulerEvents; event: unknown }[] = [];
    const scheduler = new Scheduler({
      registry: new Registry(every('tick', 1000, async () => {})),
      backend,
      clock,
      pollInterval: 1000,
      leadershipTTL: 3000,
    });
    for (const name of [
      'leadershipAcquired',
      'leadershipLost',
      'occurrenceAdmitted',
      'occurrenceFinished',
    ] as const)
      scheduler.on(name, (event) => void heard.push({ name, event }));
    const done = scheduler.run();
    await waitFor('leadership', () => heard.some((h) => h.name === 'leadershipAcquired'));
    await clock.advance(1000);
    await waitFor('an occurrence finished', () => heard.some((h) => h.name === 'occurrenceFinished'));
    await scheduler.drain();
    await done;
    const acquired = heard.find((h) => h.name === 'leadershipAcquired')
      ?.event as SchedulerEvents['leadershipAcquired'];
    expect(acquired.group).toBe('default');
    expect(acquired.epoch).toBe(scheduler.snapshot().history[0]?.epoch);
    const admitted = heard.find((h) => h.name === 'occurrenceAdmitted')
      ?.event as SchedulerEvents['occurrenceAdmitted'];
    const finished = heard.find((h) => h.name === 'occurrenceFinished')
      ?.event as SchedulerEvents['occurrenceFinished'];
    expect(admitted.record.state).toBe('running');
    expect(finished.record.state).toBe('succeeded');
    expect(finished.record.occurrence).toBe(admitted.record.occurrence);
    const lost = heard.find((h) => h.name === 'leadershipLost')?.event as SchedulerEvents['leadershipLost'];
    expect(lost).toMatchObject({ reason: 'resigned', epoch: acquired.epoch });
    const order = heard.map((h) => h.name);
    expect(order.indexOf('leadershipAcquired')).toBeLessThan(order.indexOf('occurrenceAdmitted'));
    expect(order.at(-1)).toBe('leadershipLost');
  });
});
