import { describe, expect, it } from 'vitest';
import {
  ConflictError,
  createMemoryBackend,
  type DeliveryContext,
  Dispatcher,
  InvalidArgumentError,
  intervalFrom,
  ManualClock,
  type MissedEvent,
  NotFoundError,
  PAUSED_DUE,
  parseCron,
  recurring,
  recurringOccurrenceId,
  type Transaction,
} from '../../src/index.js';

const T0 = Date.parse('2026-01-05T00:00:00Z');
const MINUTE = 60_000;
const HOUR = 3_600_000;

/** A memory store on a manual clock, with a dispatcher that records every delivery and missed event. */
function world(options: { start?: number } = {}) {
  const clock = new ManualClock(new Date(options.start ?? T0));
  const backend = createMemoryBackend({ clock });
  const store = backend.store;
  const runs: { key: string; at: string; kind?: string; id?: string; number?: number }[] = [];
  const missed: Pick<MissedEvent, 'count' | 'first' | 'last' | 'reason'>[] = [];
  const dispatcher = new Dispatcher({
    store,
    retryDelay: 1000,
    processor: async (_tx, _message, context: DeliveryContext) => {
      runs.push({
        key: context.schedule.key,
        at: (context.occurrence?.at ?? context.schedule.at).toISOString(),
        ...(context.occurrence
          ? { kind: context.occurrence.kind, id: context.occurrence.id, number: context.occurrence.number }
          : {}),
      });
    },
  });
  dispatcher.on(
    'missed',
    (e) => void missed.push({ count: e.count, first: e.first, last: e.last, reason: e.reason }),
  );
  const done = dispatcher.run();
  return {
    clock,
    store,
    dispatcher,
    runs,
    missed,
    async stop() {
      const draining = dispatcher.drain();
      await clock.advance(0);
      await draining;
      await done;
    },
  };
}

/** Every minute from T0 (a recurrence whose first occurrence is T0 + 1 min). */
// No grace: an occurrence looked at after its instant has passed counts as missed.
const everyMinute = () =>
  recurring(intervalFrom(MINUTE, new Date(T0)), { startAt: new Date(T0 + MINUTE), grace: 0 });

describe('operating recurring schedules', () => {
  it('pauses a recurrence across occurrences, keeping its count and grid, and resumes it under its catch-up rule', async () => {
    const w = world();
    await w.store.transact((tx) => tx.schedule('digest/t1', everyMinute(), { type: 'digest' }));
    await w.clock.advance(MINUTE);
    expect(w.runs.map((r) => r.at)).toEqual([new Date(T0 + MINUTE).toISOString()]);
    expect(
      await w.store.transact((tx) => tx.pauseSchedule('digest/t1', { note: 'subscription lapsed' })),
    ).toBe(true);
    const paused = (await w.store.loadSchedule('digest/t1'))!;
    expect(paused.paused).toEqual({ at: new Date(T0 + MINUTE), note: 'subscription lapsed' });
    expect(paused.dueAt.getTime()).toBe(PAUSED_DUE);
    expect(paused.at.getTime()).toBe(T0 + 2 * MINUTE);
    expect(paused.recurrence?.count).toBe(1);
    // Pausing again changes nothing; nothing is delivered while paused.
    expect(await w.store.transact((tx) => tx.pauseSchedule('digest/t1'))).toBe(false);
    await w.clock.advance(5 * MINUTE);
    expect(w.runs).toHaveLength(1);
    const result = await w.store.transact((tx) => tx.resumeSchedule('digest/t1', { catchUp: { max: 2 } }));
    // +2 … +6 fell due while paused; +6 is now (not missed), { max: 2 } runs the two most recent missed.
    expect(result.resumed).toBe(true);
    const caught = [T0 + 4 * MINUTE, T0 + 5 * MINUTE, T0 + 6 * MINUTE];
    expect(result.caughtUp.map((d) => d.getTime())).toEqual(caught);
    expect(result.missed).toEqual({
      count: 2,
      first: new Date(T0 + 2 * MINUTE),
      last: new Date(T0 + 3 * MINUTE),
    });
    await w.clock.advance(0);
    expect(w.runs.slice(1)).toEqual(
      caught.map((t, i) => ({
        key: 'digest/t1',
        at: new Date(t).toISOString(),
        kind: 'caught-up',
        id: recurringOccurrenceId('digest/t1', new Date(t)),
        number: 2 + i,
      })),
    );
    // The grid goes on from the next occurrence, and the count kept the caught-up runs.
    await w.clock.advance(MINUTE);
    expect(w.runs.at(-1)).toMatchObject({
      at: new Date(T0 + 7 * MINUTE).toISOString(),
      kind: 'scheduled',
      number: 5,
    });
    expect(await w.store.transact((tx) => tx.resumeSchedule('digest/t1'))).toEqual({
      resumed: false,
      caughtUp: [],
    });
    await w.stop();
  });

  it("resumes with 'skip' running none of what fell due, and with 'latest' only the last", async () => {
    const w = world();
    await w.store.transact(async (tx) => {
      await tx.schedule('a', everyMinute(), { type: 'a' });
      await tx.schedule('b', everyMinute(), { type: 'b' });
      await tx.pauseSchedule('a');
      await tx.pauseSchedule('b');
    });
    await w.clock.advance(4 * MINUTE + 30_000);
    const skip = await w.store.transact((tx) => tx.resumeSchedule('a', { catchUp: 'skip' }));
    const latest = await w.store.transact((tx) => tx.resumeSchedule('b', { catchUp: 'latest' }));
    expect(skip.caughtUp).toEqual([]);
    expect(skip.missed?.count).toBe(4);
    expect(latest.caughtUp.map((d) => d.getTime())).toEqual([T0 + 4 * MINUTE]);
    expect(latest.missed?.count).toBe(3);
    await w.clock.advance(0);
    expect(w.runs.map((r) => [r.key, r.at])).toEqual([['b', new Date(T0 + 4 * MINUTE).toISOString()]]);
    await w.clock.advance(30_000);
    expect(w.runs.map((r) => r.key).sort()).toEqual(['a', 'b', 'b']);
    await w.stop();
  });

  it('pauses a one-shot schedule until it is resumed, then delivers it at once', async () => {
    const w = world();
    await w.store.transact(async (tx) => {
      await tx.schedule('once', new Date(T0 + MINUTE), { type: 'once' });
      await tx.pauseSchedule('once');
    });
    await w.clock.advance(10 * MINUTE);
    expect(w.runs).toEqual([]);
    expect((await w.store.loadSchedule('once'))?.paused?.at).toEqual(new Date(T0));
    await w.store.transact((tx) => tx.resumeSchedule('once'));
    await w.clock.advance(0);
    expect(w.runs).toEqual([{ key: 'once', at: new Date(T0 + MINUTE).toISOString() }]);
    expect(await w.store.loadSchedule('once')).toBeUndefined();
    await w.stop();
  });

  it('triggers an extra delivery with an id of its own, even while paused, without moving the grid or the count', async () => {
    const w = world();
    await w.store.transact(async (tx) => {
      await tx.schedule('report', everyMinute(), { type: 'report' });
      await tx.pauseSchedule('report');
    });
    await w.clock.advance(30_000);
    const id = await w.store.transact((tx) => tx.triggerSchedule('report'));
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    await w.clock.advance(0);
    expect(w.runs).toEqual([
      { key: 'report', at: new Date(T0 + 30_000).toISOString(), kind: 'triggered', id, number: 0 },
    ]);
    const after = (await w.store.loadSchedule('report'))!;
    expect(after.paused).toBeDefined();
    expect(after.at.getTime()).toBe(T0 + MINUTE);
    expect(after.recurrence?.count).toBe(0);
    expect(after.queue).toBeUndefined();
    // A one-shot schedule triggered later: the extra delivery first, then its own, once each.
    await w.store.transact((tx) => tx.schedule('one', new Date(T0 + 10 * MINUTE), { type: 'one' }));
    await w.store.transact((tx) => tx.triggerSchedule('one', { at: new Date(T0 + 2 * MINUTE) }));
    await w.clock.advance(10 * MINUTE);
    expect(w.runs.filter((r) => r.key === 'one').map((r) => [r.at, r.kind])).toEqual([
      [new Date(T0 + 2 * MINUTE).toISOString(), 'triggered'],
      [new Date(T0 + 10 * MINUTE).toISOString(), undefined],
    ]);
    expect(await w.store.loadSchedule('one')).toBeUndefined();
    await w.stop();
  });

  it('skips the next occurrences, reporting each as missed, across a DST change', async () => {
    // 02:30 every day in New York: 2026-03-08 has no 02:30 (clocks jump to 03:00), so the spec skips it.
    const start = Date.parse('2026-03-06T12:00:00Z');
    const w = world({ start });
    const spec = parseCron('30 2 * * *', 'America/New_York');
    await w.store.transact(async (tx) => {
      await tx.schedule('nightly', recurring(spec), { type: 'nightly' });
      expect(await tx.skipNext('nightly', 2)).toBe(2);
    });
    const instants: Date[] = [];
    for (let at = spec.next(new Date(start)); instants.length < 4; at = spec.next(at!)) instants.push(at!);
    await w.clock.advance(5 * 24 * HOUR);
    expect(w.missed.map((m) => [m.reason, m.count, m.first.toISOString()])).toEqual([
      ['skipped', 1, instants[0]!.toISOString()],
      ['skipped', 1, instants[1]!.toISOString()],
    ]);
    expect(w.runs.map((r) => r.at)).toEqual([instants[2]!.toISOString(), instants[3]!.toISOString()]);
    expect(w.runs[0]).toMatchObject({ number: 1 });
    expect(w.dispatcher.snapshot().missed).toBe(2);
    await w.stop();
  });

  it('backfills the occurrences of a range, oldest first, with the ids they had, across a DST overlap', async () => {
    // Every 30 minutes in Berlin; on 2026-10-25 02:00–03:00 happens twice (both are occurrences).
    const start = Date.parse('2026-10-26T00:00:00Z');
    const w = world({ start });
    const spec = parseCron('0,30 * * * *', 'Europe/Berlin');
    await w.store.transact((tx) =>
      tx.schedule('sync', recurring(spec, { startAt: new Date(start + HOUR) }), { type: 'sync' }),
    );
    const from = new Date('2026-10-24T23:30:00Z'); // 01:30 CEST
    const to = new Date('2026-10-25T02:00:00Z'); // 03:00 CET
    const queued = await w.store.transact((tx) => tx.backfillSchedule('sync', { from, to }));
    expect(queued.map((d) => d.toISOString())).toEqual([
      '2026-10-24T23:30:00.000Z',
      '2026-10-25T00:00:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-25T01:00:00.000Z',
      '2026-10-25T01:30:00.000Z',
    ]);
    await w.clock.advance(0);
    expect(w.runs.filter((r) => r.kind === 'backfill').map((r) => [r.at, r.id])).toEqual(
      queued.map((d) => [d.toISOString(), recurringOccurrenceId('sync', d)]),
    );
    expect(w.runs).toHaveLength(queued.length);
    expect((await w.store.loadSchedule('sync'))?.recurrence?.count).toBe(0);
    await w.stop();
  });

  it('refuses bad operations with typed errors, writing nothing', async () => {
    const w = world();
    await w.store.transact(async (tx) => {
      await tx.schedule('r', everyMinute(), { type: 'r' });
      await tx.schedule('o', new Date(T0 + HOUR), { type: 'o' });
    });
    const before = await w.store.listSchedules();
    type Op = (tx: Transaction<undefined>) => Promise<unknown>;
    const missing: Op[] = [
      (tx) => tx.pauseSchedule('missing'),
      (tx) => tx.resumeSchedule('missing'),
      (tx) => tx.triggerSchedule('missing'),
      (tx) => tx.skipNext('missing'),
      (tx) => tx.backfillSchedule('missing', { from: new Date(T0), to: new Date(T0 + HOUR) }),
    ];
    for (const op of missing) await expect(w.store.transact(op)).rejects.toBeInstanceOf(NotFoundError);
    const bad: [Op, string][] = [
      [(tx) => tx.backfillSchedule('r', { from: new Date(T0 + HOUR), to: new Date(T0) }), 'range.to'],
      [(tx) => tx.backfillSchedule('r', { from: new Date(T0), to: new Date(Number.NaN) }), 'range.to'],
      [(tx) => tx.backfillSchedule('r', { from: new Date(T0 - 2000 * MINUTE), to: new Date(T0) }), 'range'],
      [(tx) => tx.backfillSchedule('o', { from: new Date(T0 - HOUR), to: new Date(T0) }), 'key'],
      [(tx) => tx.skipNext('o'), 'key'],
      [(tx) => tx.skipNext('r', 0), 'n'],
      [(tx) => tx.pauseSchedule('r', { note: 'x'.repeat(1001) }), 'options.note'],
      [(tx) => tx.resumeSchedule('r', { catchUp: 'sometimes' as never }), 'options.catchUp'],
      [(tx) => tx.triggerSchedule('r', { at: 'now' as never }), 'options.at'],
    ];
    for (const [op, field] of bad) {
      const error = await w.store.transact(op).catch((e: unknown) => e);
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field, field).toBe(field);
    }
    expect(await w.store.listSchedules()).toEqual(before);
    await w.stop();
  });

  it('lets the later version win when an operation races a running occurrence: nothing runs twice', async () => {
    const clock = new ManualClock(new Date(T0));
    const backend = createMemoryBackend({ clock });
    const store = backend.store;
    await store.transact((tx) => tx.schedule('race', everyMinute(), { type: 'race' }));
    const ran: string[] = [];
    let release: () => void = () => {};
    const dispatcher = new Dispatcher({
      store,
      processor: async (_tx, _m, context) => {
        ran.push(context.occurrence!.at.toISOString());
        if (ran.length === 1) await new Promise<void>((resolve) => (release = resolve));
      },
    });
    const done = dispatcher.run();
    await clock.advance(MINUTE);
    expect(ran).toHaveLength(1);
    // While the occurrence runs, pause the schedule: the pause writes a newer version.
    await store.transact((tx) => tx.pauseSchedule('race'));
    release();
    await clock.advance(0);
    // The delivery held the older version: its commit does not apply, and the paused schedule stays.
    const after = (await store.loadSchedule('race'))!;
    expect(after.paused).toBeDefined();
    expect(after.at.getTime()).toBe(T0 + MINUTE);
    expect(dispatcher.snapshot()).toMatchObject({ skipped: 1, delivered: 0 });
    // A pause written on a version that changed meanwhile is re-run on the newer one.
    const reads: number[] = [];
    let interleaved = false;
    await store.transact(async (tx) => {
      reads.push((await tx.loadSchedule('race'))!.version);
      await tx.resumeSchedule('race', { catchUp: 'skip' });
      if (!interleaved) {
        // Another transaction changes the schedule between this one's read and its commit.
        interleaved = true;
        await store.transact((other) => other.triggerSchedule('race'));
      }
    });
    expect(reads).toHaveLength(2);
    expect(reads[1]).toBeGreaterThan(reads[0]!);
    expect(ConflictError).toBeDefined();
    const draining = dispatcher.drain();
    await clock.advance(0);
    await draining;
    await done;
  });

  it('reports every occurrence its catch-up rule did not run: one event per decision, counted one by one', async () => {
    const hourly = (catchUp: 'skip' | 'latest' | { max: number }) =>
      recurring(intervalFrom(HOUR, new Date(T0)), { startAt: new Date(T0 + HOUR), catchUp, grace: 0 });
    const clock = new ManualClock(new Date(T0));
    const backend = createMemoryBackend({ clock });
    await backend.store.transact(async (tx) => {
      await tx.schedule('skip', hourly('skip'), { type: 't' });
      await tx.schedule('latest', hourly('latest'), { type: 't' });
      await tx.schedule('max', hourly({ max: 2 }), { type: 't' });
    });
    // Down for five hourly occurrences (+1 h … +5 h), back at +5 h 30 min.
    clock.set(T0 + 5 * HOUR + 30 * MINUTE);
    const missed: Record<string, number[]> = {};
    const ran: Record<string, number> = {};
    const dispatcher = new Dispatcher({
      store: backend.store,
      processor: async (_tx, _m, context) => {
        ran[context.schedule.key] = (ran[context.schedule.key] ?? 0) + 1;
      },
    });
    dispatcher.on('missed', (e) => {
      missed[e.schedule.key] ??= [];
      missed[e.schedule.key]!.push(e.count);
      expect(e.reason).toBe('catch-up');
    });
    const done = dispatcher.run();
    await clock.advance(0);
    expect(missed).toEqual({ skip: [5], latest: [4], max: [3] });
    expect(ran).toEqual({ latest: 1, max: 2 });
    expect(dispatcher.snapshot().missed).toBe(12);
    const draining = dispatcher.drain();
    await clock.advance(0);
    await draining;
    await done;
  });
});
