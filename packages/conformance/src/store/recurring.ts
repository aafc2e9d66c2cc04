import {
  Dispatcher,
  type DispatcherOptions,
  InvalidArgumentError,
  intervalFrom,
  ManualClock,
  type Processor,
  parseCron,
  type Recurrence,
  recurring,
  type Spec,
  type Store,
} from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

const HOUR = 3_600_000;
const MINUTE = 60_000;

/** One delivered occurrence, as the processor saw it. */
interface Delivery {
  key: string;
  at: number;
  id: string;
  number: number;
  version: number;
}

/**
 * Recurring schedules in the store: each occurrence delivered once, armed atomically with the previous one's
 * consumption, DST policies, catch-up rules, bounds, replacement and cancellation. Time is a ManualClock
 * given to the dispatcher; occurrences lie in the future of the real clock, so the store's own clock (which
 * places a new recurrence's first occurrence) agrees with them.
 */
export function recurringTests({ harness }: SuiteContext): void {
  /** A dispatcher on a manual clock that records every delivered occurrence (and its effect). */
  const run = (store: Store<unknown>, clock: ManualClock, options: Partial<DispatcherOptions> = {}) => {
    const delivered: Delivery[] = [];
    const record: Processor = async (tx, message, { schedule, occurrence }) => {
      delivered.push({
        key: schedule.key,
        at: occurrence!.at.getTime(),
        id: occurrence!.id,
        number: occurrence!.number,
        version: schedule.version,
      });
      await tx.exec(effects, message.aggregateId!, (_s, ag) =>
        ag.raise('effect.applied', { key: schedule.key, at: occurrence!.at.getTime() }),
      );
    };
    const dispatcher = new Dispatcher({
      store,
      clock,
      rescanInterval: 3_600_000,
      retryDelay: 10 * MINUTE,
      processor: record,
      ...options,
    });
    harness().run(dispatcher);
    /** Moves the clock to `t`, wakes the dispatcher and waits until it has nothing due left. */
    const at = async (t: number) => {
      clock.set(t);
      dispatcher.wake();
      await waitFor(`nothing due at ${new Date(t).toISOString()}`, async () => {
        const page = await store.pageSchedules({ limit: 100 });
        return page.items.every((s) => s.dueAt.getTime() > t) && dispatcher.snapshot().inFlight === 0;
      });
    };
    return { delivered, dispatcher, at };
  };

  /** Schedules `key` recurring on `recurrence`, for the effects aggregate `aggregate`. */
  const schedule = (
    store: Store<unknown>,
    key: string,
    recurrence: Recurrence,
    aggregate = key.replaceAll('/', '-'),
  ) => store.transact((tx) => tx.schedule(key, recurrence, effectMessage(aggregate)));

  const iso = (text: string) => Date.parse(text);
  const times = (list: Delivery[], key: string) =>
    list.filter((d) => d.key === key).map((d) => new Date(d.at).toISOString());

  it('fires across a DST gap and overlap as each policy says, once per occurrence', async () => {
    const { store } = await harness().open();
    const ny = 'America/New_York';
    // 2027-03-14: 02:00 EST jumps to 03:00 EDT. 2027-11-07: 01:00–02:00 happens twice.
    const gapFrom = new Date('2027-03-13T05:00:00Z');
    const overlapFrom = new Date('2027-11-06T04:00:00Z');
    const cases: [string, Spec, Date][] = [
      ['gap/skip', parseCron('30 2 * * *', ny, { dst: { gap: 'skip' } }), gapFrom],
      ['gap/shift', parseCron('30 2 * * *', ny, { dst: { gap: 'shift' } }), gapFrom],
      ['overlap/both', parseCron('30 1 * * *', ny, { dst: { overlap: 'both' } }), overlapFrom],
      ['overlap/first', parseCron('30 1 * * *', ny, { dst: { overlap: 'first' } }), overlapFrom],
      ['overlap/last', parseCron('30 1 * * *', ny, { dst: { overlap: 'last' } }), overlapFrom],
    ];
    for (const [key, spec, startAt] of cases)
      await schedule(
        store,
        key,
        recurring(spec, { startAt, endAt: new Date(startAt.getTime() + 3 * 24 * HOUR) }),
      );
    const clock = new ManualClock(gapFrom);
    const { delivered, at } = run(store, clock);
    const expected: Record<string, string[]> = {
      'gap/skip': ['2027-03-13T07:30:00.000Z', '2027-03-15T06:30:00.000Z'],
      'gap/shift': ['2027-03-13T07:30:00.000Z', '2027-03-14T07:00:00.000Z', '2027-03-15T06:30:00.000Z'],
      'overlap/both': [
        '2027-11-06T05:30:00.000Z',
        '2027-11-07T05:30:00.000Z',
        '2027-11-07T06:30:00.000Z',
        '2027-11-08T06:30:00.000Z',
      ],
      'overlap/first': ['2027-11-06T05:30:00.000Z', '2027-11-07T05:30:00.000Z', '2027-11-08T06:30:00.000Z'],
      'overlap/last': ['2027-11-06T05:30:00.000Z', '2027-11-07T06:30:00.000Z', '2027-11-08T06:30:00.000Z'],
    };
    const instants = [...new Set(Object.values(expected).flat())].map(iso).sort((a, b) => a - b);
    for (const t of instants) await at(t);
    for (const [key] of cases) expect(times(delivered, key), key).toEqual(expected[key]);
    // Bounded by endAt: each recurrence is over, nothing is left.
    expect((await store.listSchedules()).length).toBe(0);
    // Ids are stable per (key, instant) and distinct across occurrences; versions only grow.
    for (const [key] of cases) {
      const mine = delivered.filter((d) => d.key === key);
      expect(new Set(mine.map((d) => d.id)).size).toBe(mine.length);
      expect(mine.map((d) => d.number)).toEqual(mine.map((_, i) => i + 1));
      expect(mine.every((d, i) => i === 0 || d.version > mine[i - 1]!.version)).toBe(true);
    }
  });

  it('after downtime, runs missed occurrences as the catch-up rule says: skip, latest, or each up to a bound', async () => {
    const { store } = await harness().open();
    const start = iso('2027-06-01T00:00:00Z');
    const hourly = intervalFrom(HOUR, new Date(start));
    await schedule(store, 'catch/skip', recurring(hourly, { startAt: new Date(start), catchUp: 'skip' }));
    await schedule(store, 'catch/latest', recurring(hourly, { startAt: new Date(start), catchUp: 'latest' }));
    await schedule(store, 'catch/each', recurring(hourly, { startAt: new Date(start), catchUp: { max: 2 } }));
    // Down from before the first occurrence until 05:30: 00:00 … 05:00 were missed.
    const clock = new ManualClock(start + 5 * HOUR + 30 * MINUTE);
    const { delivered, dispatcher, at } = run(store, clock);
    await at(clock.now());
    expect(times(delivered, 'catch/skip')).toEqual([]);
    expect(times(delivered, 'catch/latest')).toEqual(['2027-06-01T05:00:00.000Z']);
    expect(times(delivered, 'catch/each')).toEqual(['2027-06-01T04:00:00.000Z', '2027-06-01T05:00:00.000Z']);
    expect(dispatcher.snapshot().missed).toBeGreaterThanOrEqual(1);
    await at(start + 6 * HOUR);
    for (const key of ['catch/skip', 'catch/latest', 'catch/each'])
      expect(times(delivered, key).at(-1), key).toBe('2027-06-01T06:00:00.000Z');
    // An occurrence delivered within the grace period is not missed.
    await at(start + 7 * HOUR + 30_000);
    expect(times(delivered, 'catch/skip').at(-1)).toBe('2027-06-01T07:00:00.000Z');
  });

  it('ends at endAt and after maxOccurrences, and cancels by prefix', async () => {
    const { store } = await harness().open();
    const start = iso('2027-07-01T00:00:00Z');
    const hourly = intervalFrom(HOUR, new Date(start));
    await schedule(store, 'bounds/max', recurring(hourly, { startAt: new Date(start), maxOccurrences: 3 }));
    await schedule(
      store,
      'bounds/end',
      recurring(hourly, { startAt: new Date(start), endAt: new Date(start + HOUR) }),
    );
    await schedule(store, 'tenant/42/digest', recurring(hourly, { startAt: new Date(start) }));
    await schedule(store, 'tenant/42/bill', recurring(hourly, { startAt: new Date(start) }));
    await schedule(store, 'tenant/420/digest', recurring(hourly, { startAt: new Date(start) }));
    const clock = new ManualClock(start);
    const { delivered, at } = run(store, clock);
    await at(start);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('tenant/42/'))).toBe(2);
    for (let h = 1; h <= 5; h++) await at(start + h * HOUR);
    expect(times(delivered, 'bounds/max')).toHaveLength(3);
    expect(times(delivered, 'bounds/end')).toEqual(['2027-07-01T00:00:00.000Z', '2027-07-01T01:00:00.000Z']);
    expect(times(delivered, 'tenant/42/digest')).toEqual(['2027-07-01T00:00:00.000Z']);
    expect(times(delivered, 'tenant/42/bill')).toEqual(['2027-07-01T00:00:00.000Z']);
    expect(times(delivered, 'tenant/420/digest')).toHaveLength(6);
    expect((await store.listSchedules()).map((s) => s.key)).toEqual(['tenant/420/digest']);
  });

  it('retries a failed occurrence without shifting later ones, and goes on after a dead letter', async () => {
    const { store } = await harness().open();
    const start = iso('2027-08-01T00:00:00Z');
    await schedule(
      store,
      'flaky/daily',
      recurring(intervalFrom(HOUR, new Date(start)), { startAt: new Date(start) }),
    );
    const before = (await store.loadSchedule('flaky/daily'))!;
    expect(before.recurrence).toEqual({
      v: 1,
      spec: { kind: 'interval', everyMs: HOUR, anchor: start },
      startAt: start,
      catchUp: 'latest',
      grace: MINUTE,
      count: 0,
    });
    let attempts = 0;
    const clock = new ManualClock(start);
    const { at } = run(store, clock, {
      maxAttempts: 2,
      retryDelay: 10 * MINUTE,
      processor: async (tx, message, { occurrence }) => {
        if (occurrence!.at.getTime() === start) {
          attempts++;
          throw new Error('first occurrence fails');
        }
        await tx.exec(effects, message.aggregateId!, (_s, ag) =>
          ag.raise('effect.applied', { at: occurrence!.at.getTime() }),
        );
      },
    });
    await at(start);
    const retrying = (await store.loadSchedule('flaky/daily'))!;
    expect(retrying).toMatchObject({
      version: before.version,
      attempts: 1,
      lastError: 'Error: first occurrence fails',
    });
    expect(retrying.at.getTime()).toBe(start);
    await at(start + 10 * MINUTE);
    expect(attempts).toBe(2);
    const dead = (await store.loadDeadLetter('flaky/daily'))!;
    expect(dead.at.getTime()).toBe(start);
    const next = (await store.loadSchedule('flaky/daily'))!;
    expect(next.at.getTime()).toBe(start + HOUR);
    expect(next.version).toBeGreaterThan(before.version);
    expect(next.recurrence?.count).toBe(1);
    await at(start + HOUR);
    expect(await appliedCount(store, 'flaky-daily')).toBe(1);
    expect((await store.loadSchedule('flaky/daily'))?.at.getTime()).toBe(start + 2 * HOUR);
  });

  it('lets a replacement committed while an occurrence runs win: the old recurrence arms nothing', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const start = iso('2027-09-01T00:00:00Z');
    await schedule(
      first.store,
      'swap/me',
      recurring(intervalFrom(HOUR, new Date(start)), { startAt: new Date(start) }),
    );
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const clock = new ManualClock(start);
    const dispatcher = new Dispatcher({
      store: first.store,
      clock,
      rescanInterval: HOUR,
      processor: async (tx, message) => {
        entered();
        await gate;
        await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
      },
    });
    harness().run(dispatcher);
    await inside;
    const replacement = second.store.transact((tx) =>
      tx.schedule('swap/me', new Date(start + 30 * 24 * HOUR), effectMessage('replacement')),
    );
    if (!harness().promised(first).sql) await replacement;
    release();
    await replacement;
    await waitFor(
      'the batch to end',
      () => dispatcher.snapshot().inFlight === 0 && dispatcher.snapshot().batches >= 1,
    );
    const now = (await first.store.loadSchedule('swap/me'))!;
    expect(now.message).toEqual(effectMessage('replacement'));
    expect(now.recurrence).toBeUndefined();
    expect(now.at.getTime()).toBe(start + 30 * 24 * HOUR);
  });

  it('refuses bad recurrences at the call with typed errors, committing nothing', async () => {
    const { store } = await harness().open();
    const spec = parseCron('0 9 * * MON', 'America/New_York');
    const soon = new Date(Date.now() + HOUR);
    const bad: [string, () => unknown][] = [
      ['recurrence.endAt', () => recurring(spec, { startAt: soon, endAt: new Date(soon.getTime() - 1) })],
      ['recurrence.maxOccurrences', () => recurring(spec, { maxOccurrences: 0 })],
      ['recurrence.catchUp', () => recurring(spec, { catchUp: 'all' as never })],
      ['recurrence.grace', () => recurring(spec, { grace: -1 })],
      ['recurrence.spec', () => recurring({ next: () => undefined } as never)],
      ['recurrence.startAt', () => recurring(spec, { startAt: new Date(Number.NaN) })],
    ];
    for (const [field, make] of bad) {
      let error: unknown;
      try {
        make();
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
    // No occurrence within its bounds (a Monday-only spec over a Tuesday): refused when scheduled.
    const tuesday = new Date('2027-06-01T00:00:00-04:00');
    const empty = recurring(spec, { startAt: tuesday, endAt: new Date(tuesday.getTime() + 20 * HOUR) });
    const refused = await store
      .transact(async (tx) => {
        await tx.schedule('bad/before', new Date(Date.now() + HOUR), effectMessage('x'));
        await tx.schedule('bad/empty', empty, effectMessage('x'));
      })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as InvalidArgumentError).field).toBe('recurrence');
    expect(await store.listSchedules()).toEqual([]);
  });
}
