import { freshNamespace, waitFor } from '@duetime/conformance';
import {
  aggregate,
  type Backend,
  Dispatcher,
  intervalFrom,
  type Message,
  recurring,
  type Schedule,
  type Settlement,
  type StoreChange,
} from '@duetime/core';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { H } from '../src/jetstream-scheduler/headers.js';
import { layout } from '../src/layout.js';
import type { NatsStoreAdapter } from '../src/store/adapter.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { alterSweepDelivery, closeStoreAdapters, storeAdapterOn } from './store-adapter.js';

const HOUR = 3_600_000;
const counter = aggregate({ type: 'counter', initial: 0, apply: { added: (n: number) => n + 1 } });
const msg = (id: string, data?: unknown): Message => ({
  type: 'test',
  aggregateId: id,
  ...(data ? { data } : {}),
});

/** The subjects of the store stream that hold messages, by kind (`s`, `t`, `f`, `e`, `x`, `meta`). */
async function subjectsByKind(namespace: string): Promise<Map<string, string[]>> {
  const nc = await connectNats(NATS_STORE_URL);
  try {
    const io = await NatsIo.open(nc, 5000);
    const l = layout(namespace);
    const subjects = await io.subjects(l.storeStream, `${namespace}.>`);
    const byKind = new Map<string, string[]>();
    for (const subject of subjects.keys()) {
      const kind = subject.split('.')[1] as string;
      byKind.set(kind, [...(byKind.get(kind) ?? []), subject]);
    }
    return byKind;
  } finally {
    await nc.close();
  }
}

/** Makes every sweep of `io` stall after `count` records: nothing more comes until the sweep stops it. */
function stallSweepAfter(io: NatsIo, count: number): void {
  alterSweepDelivery(io, (real) => {
    let release = () => {};
    return Object.assign(
      (async function* () {
        let n = 0;
        for await (const m of real) {
          if (++n > count) {
            await new Promise<void>((resolve) => {
              release = resolve;
            });
            return;
          }
          yield m;
        }
      })(),
      {
        stop() {
          real.stop();
          release();
        },
      },
    );
  });
}

/** The store adapter of the backend under `namespace` (opened already), on a connection of its own. */
async function adapterOf(namespace: string): Promise<NatsStoreAdapter> {
  return (await storeAdapterOn(namespace)).adapter;
}

/** Claims up to `limit` schedules due by `now` and settles each with `settle`. */
async function deliver(
  adapter: NatsStoreAdapter,
  now: Date,
  limit: number,
  settle: (s: Schedule) => Omit<Settlement, 'schedule' | 'writes'> = () => ({ outcome: 'consume' }),
): Promise<Schedule[]> {
  const unit = await adapter.begin({ now, limit });
  const claimed = [...(unit.claimed ?? [])];
  await adapter.commit(unit, {
    writes: [],
    settlements: claimed.map((s) => ({ schedule: s, writes: [], ...settle(s) })),
  });
  return claimed;
}

describe('nats store adapter', () => {
  const backends: Backend[] = [];
  async function open(namespace = freshNamespace()): Promise<Backend & { namespace: string }> {
    const backend = await openOn(NATS_STORE_URL, namespace);
    backends.push(backend);
    return Object.assign(backend, { namespace });
  }
  /**
   * A backend (claims living 1 s) with `n` schedules `<prefix>/<i>` due, all claimed by another process
   * that then dies: its claims are never renewed, committed or given back, so they lapse together.
   */
  async function lapsedClaims(prefix: string, n: number): Promise<Backend> {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace, { claims: { ttlMs: 1000 } });
    backends.push(backend);
    await backend.store.transact(async (tx) => {
      for (let i = 0; i < n; i++) await tx.schedule(`${prefix}/${i}`, new Date(Date.now() - 1000), msg('l'));
    });
    const { adapter, io } = await storeAdapterOn(namespace, { claimTtlMs: 1000 });
    let claimed = 0;
    await waitFor('every schedule claimed by the process that dies', async () => {
      claimed += (await adapter.begin({ now: new Date(), limit: n })).claimed?.length ?? 0;
      return claimed >= n;
    });
    await io.nc.close();
    return backend;
  }
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
    await closeStoreAdapters();
  });
  afterAll(deleteOpened, 60_000);

  /** A backend with `n` schedules `<prefix>/<i>` due in an hour, and a store adapter of its own on it. */
  async function pendingOn(prefix: string, n: number) {
    const { store, namespace } = await open();
    await store.transact(async (tx) => {
      for (let i = 0; i < n; i++)
        await tx.schedule(`${prefix}/${i}`, new Date(Date.now() + HOUR), msg(`${prefix}${i}`));
    });
    return { store, namespace, ...(await storeAdapterOn(namespace)) };
  }

  it('pages through thousands of schedules in (at, key) order, and lists them by due time', async () => {
    const { store, namespace } = await open();
    const adapter = await adapterOf(namespace);
    const base = Date.now() + HOUR;
    const count = 1500;
    for (let batch = 0; batch < count; batch += 300)
      await store.transact(async (tx) => {
        for (let i = batch; i < batch + 300; i++)
          await tx.schedule(
            `page/${String(i % 37).padStart(2, '0')}/${i}`,
            new Date(base + (i % 250) * 1000),
            msg(`a${i}`),
          );
      });
    const seen: { at: number; key: string }[] = [];
    let page = await store.pageSchedules({ limit: 128 });
    for (;;) {
      seen.push(...page.items.map((s) => ({ at: s.at.getTime(), key: s.key })));
      if (!page.next) break;
      page = await store.pageSchedules({ limit: 128, after: page.next });
    }
    expect(seen).toHaveLength(count);
    for (let i = 1; i < seen.length; i++) {
      const a = seen[i - 1] as { at: number; key: string };
      const b = seen[i] as { at: number; key: string };
      expect(a.at < b.at || (a.at === b.at && a.key < b.key)).toBe(true);
    }
    // A prefix holding 1/37 of the keys, in deadline order, through an instant.
    const through = new Date(base + 100_000);
    const prefixed = (await store.pageSchedules({ prefix: 'page/05/', through, limit: 10_000 })).items;
    const expected = seen.filter((s) => s.key.startsWith('page/05/') && s.at <= through.getTime());
    expect(prefixed.map((s) => s.key)).toEqual(expected.map((s) => s.key));

    // By due time: the first second's schedules, and nothing of later seconds.
    const dueBy = async (at: Date) =>
      (await store.pageSchedules({ order: 'due', through: at, limit: 1000 })).items.map((s) => s.key);
    const first = await dueBy(new Date(base));
    expect(first.sort()).toEqual(seen.filter((s) => s.at === base).map((s) => s.key));
    expect(await store.nextDueAt()).toEqual(new Date(base));
    // A failed attempt moves one schedule behind the others of its second, atomically with its part (a
    // delivery on a clock an hour ahead of the server's: it reads the records for what is due by it).
    const [claimed] = await deliver(adapter, new Date(base), 1, () => ({
      outcome: 'retry',
      failure: { attempts: 1, dueAt: new Date(base + 1500), error: 'x' },
    }));
    if (!claimed) throw new Error('nothing was claimed');
    const moved = await store.loadSchedule(claimed.key);
    expect(moved).toMatchObject({ version: claimed.version, attempts: 1, lastError: 'x' });
    expect(moved?.dueAt).toEqual(new Date(base + 1500));
    const due = await dueBy(new Date(base + 999));
    expect(due.sort()).toEqual(first.filter((k) => k !== claimed.key).sort());
    expect(await dueBy(new Date(base + 1500))).toContain(claimed.key);

    // One transaction writes at most 1,000 messages (one atomic batch): cancel a tenth at a time.
    let cancelled = 0;
    for (let d = 0; d < 4; d++)
      cancelled += await store.transact((tx) => tx.cancelSchedulePrefix(`page/${d}`));
    expect(cancelled).toBe(count);
    expect(await store.nextDueAt()).toBeUndefined();
  }, 120_000);

  it('counts in one pass over the records that stops at the limit (no page of heads read twice)', async () => {
    const { store, namespace } = await open();
    const base = Date.now() + HOUR;
    const count = 1500;
    for (let batch = 0; batch < count; batch += 300)
      await store.transact(async (tx) => {
        for (let i = batch; i < batch + 300; i++)
          await tx.schedule(`count/${i % 3}/${i}`, new Date(base + i * 1000), msg(`c${i}`));
      });
    const { adapter, io } = await storeAdapterOn(namespace);
    const sweep = io.sweep.bind(io);
    let sweeps = 0;
    let read = 0;
    io.sweep = async function* (stream, filter) {
      sweeps++;
      for await (const m of sweep(stream, filter)) {
        read++;
        yield m;
      }
    };
    const counted = async (query: Parameters<NatsStoreAdapter['countSchedules']>[0]) => {
      sweeps = 0;
      read = 0;
      return { count: await adapter.countSchedules(query), sweeps, read };
    };
    expect(await counted({ order: 'at', limit: 1000 })).toEqual({ count: 1000, sweeps: 1, read: 1000 });
    expect(await counted({ order: 'at', limit: 10_000 })).toEqual({ count, sweeps: 1, read: count });
    // A prefix of whole segments is a subject filter: the server sends only its 500.
    expect(await counted({ order: 'at', prefix: 'count/1/', limit: 10_000 })).toEqual({
      count: 500,
      sweeps: 1,
      read: 500,
    });
    expect(await counted({ order: 'due', through: new Date(base + 99_000), limit: 10_000 })).toEqual({
      count: 100,
      sweeps: 1,
      read: count,
    });
    expect(await counted({ order: 'at', prefix: 'none/', limit: 10 })).toEqual({
      count: 0,
      sweeps: 1,
      read: 0,
    });
    expect(await store.countSchedules({ limit: 1200 })).toBe(1200);
    expect(await store.countSchedules({ through: new Date(base + 9_000), limit: 5000 })).toBe(10);
    expect(await store.countSchedules({ prefix: 'count/2/', limit: 5000 })).toBe(500);
  }, 60_000);

  it('leaves no consumer behind a read: more listings than the 1,000 consumers NATS 2.15 allows a stream', async () => {
    const { namespace, adapter, io } = await pendingOn('sweep', 30);
    const l = layout(namespace);
    const consumers = async () => (await io.jsm.consumers.list(l.storeStream).next()).map((c) => c.name);
    const before = await consumers();
    expect(before).toEqual([l.firesConsumer]);
    // A read in progress has a consumer of its own, which the server drops 30 s after its reader stops
    // asking (a process that died during the read), not after the client's default of five minutes.
    for await (const _ of io.sweep(l.storeStream, l.recordFilter(''))) {
      const during = await io.jsm.consumers.list(l.storeStream).next();
      const sweeping = during.filter((c) => c.name !== l.firesConsumer);
      expect(sweeping.map((c) => c.config.inactive_threshold)).toEqual([30_000_000_000]);
      break; // a read broken off by its caller deletes its consumer as well
    }
    expect(await consumers()).toEqual(before);
    for (let i = 0; i < 1005; i++) {
      // Counts that stop at their limit, and listings of a prefix with nothing under it.
      if (i % 2 === 0) expect(await adapter.countSchedules({ order: 'at', limit: 1 })).toBe(1);
      else expect(await adapter.listSchedules({ order: 'at', prefix: 'none/', limit: 10 })).toEqual([]);
    }
    expect((await adapter.listSchedules({ order: 'at', limit: 100 })).length).toBe(30);
    expect(await consumers()).toEqual(before);
  }, 120_000);

  it('throws, never returns a short listing, when the connection closes while records stream in', async () => {
    const { namespace, adapter, io } = await pendingOn('short', 300);
    expect(await adapter.countSchedules({ order: 'at', limit: 1000 })).toBe(300);
    const l = layout(namespace);
    let seen = 0;
    const reading = (async () => {
      for await (const _ of io.sweep(l.storeStream, l.recordFilter(''))) {
        if (++seen === 1) await io.nc.close();
      }
    })();
    // The connection is gone: the read says so (ClosedError) instead of ending with what it had.
    await expect(reading).rejects.toThrow(/closed/);
    expect(seen).toBeLessThan(300);
  }, 60_000);

  it('finishes a listing whose streamed delivery stalls with direct gets: every record once', async () => {
    const { namespace, io } = await pendingOn('stall', 400);
    // The server stops sending after 150 records (as when one counted as pending was rolled up first).
    stallSweepAfter(io, 150);
    const l = layout(namespace);
    const seqs: number[] = [];
    for await (const m of io.sweep(l.storeStream, l.recordFilter(''))) seqs.push(m.seq);
    expect(seqs).toHaveLength(400);
    expect(new Set(seqs).size).toBe(400);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
  }, 60_000);

  it("finishes a stalled listing without waiting for its consumer's delete, and still sends it", async () => {
    const { namespace, io } = await pendingOn('stall-delete', 200);
    const l = layout(namespace);
    const others = async () =>
      (await io.jsm.consumers.list(l.storeStream).next())
        .map((c) => c.name)
        .filter((n) => n !== l.firesConsumer);
    // The delivery stops after 50 records, and the delete of the read's consumer gets no answer until
    // released (as over a network that stalled): the read goes on with direct gets.
    stallSweepAfter(io, 50);
    const held: Array<() => Promise<unknown>> = [];
    const get = io.js.consumers.get.bind(io.js.consumers);
    io.js.consumers.get = (async (...args: Parameters<typeof get>) => {
      const consumer = await get(...args);
      const remove = consumer.delete.bind(consumer);
      consumer.delete = () => {
        held.push(remove);
        return new Promise<boolean>(() => {});
      };
      return consumer;
    }) as typeof get;
    const seqs: number[] = [];
    for await (const m of io.sweep(l.storeStream, l.recordFilter(''))) seqs.push(m.seq);
    expect(new Set(seqs).size).toBe(200);
    expect(held).toHaveLength(1);
    expect(await others()).toHaveLength(1);
    await held[0]?.();
    expect(await others()).toEqual([]);
  }, 60_000);

  it('tells the due backlog from the timers that fired, reading no schedule that waits for later', async () => {
    const { store, namespace } = await open();
    const now = Date.now();
    for (let batch = 0; batch < 1500; batch += 300)
      await store.transact(async (tx) => {
        for (let i = batch; i < batch + 300; i++)
          await tx.schedule(`wait/${i}`, new Date(now + HOUR + i), msg(`w${i}`));
      });
    await store.transact(async (tx) => {
      for (let i = 1; i <= 3; i++) await tx.schedule(`due/${i}`, new Date(now - i * 1000), msg(`d${i}`));
    });
    const { adapter, io } = await storeAdapterOn(namespace);
    const l = layout(namespace);
    const filters: string[] = [];
    const asked: string[] = [];
    const range = io.range.bind(io);
    const lastOf = io.lastOf.bind(io);
    io.range = (stream, filter, ...rest) => {
      filters.push(filter);
      return range(stream, filter, ...rest);
    };
    io.lastOf = (stream, subjects) => {
      asked.push(...subjects);
      return lastOf(stream, subjects);
    };
    const backlog = () => adapter.dueBacklog({ now: new Date(), limit: 10_000 });
    await waitFor('three timers fired', async () => (await backlog()).count === 3);
    filters.length = 0;
    asked.length = 0;
    expect(await backlog()).toEqual({ count: 3, oldest: new Date(now - 3000) });
    expect(filters).toEqual([l.fires]);
    expect(asked.sort()).toEqual([1, 2, 3].map((i) => l.record(`due/${i}`)));
    // Claimed by a delivery still running: still due (its fire is pending, in hand).
    const unit = await adapter.begin({ now: new Date(), limit: 1 });
    const held = unit.claimed?.[0];
    if (!held) throw new Error('nothing was claimed');
    expect(await backlog()).toEqual({ count: 3, oldest: new Date(now - 3000) });
    // Its attempt failed, retried in an hour: no longer due (the record's timer is the retry's).
    await adapter.commit(unit, {
      writes: [],
      settlements: [
        {
          schedule: held,
          outcome: 'retry',
          failure: { attempts: 1, dueAt: new Date(now + HOUR), error: 'x' },
          writes: [],
        },
      ],
    });
    const others = [1, 2, 3].filter((i) => `due/${i}` !== held.key);
    expect(await backlog()).toEqual({ count: 2, oldest: new Date(now - Math.max(...others) * 1000) });
    // Consumed by a delivery: gone from the backlog.
    await deliver(adapter, new Date(), 10);
    expect(await backlog()).toEqual({ count: 0 });
  }, 60_000);

  it('gives back a fire its ended watch took, so that it is not claimed as a crash (no attempt counted)', async () => {
    const { store, namespace } = await open();
    const watching = await adapterOf(namespace);
    let live!: () => void;
    const isLive = new Promise<void>((resolve) => {
      live = resolve;
    });
    const unwatch = watching.watch((event) => {
      if (event.type === 'live') live();
    });
    await isLive;
    // The long poll is on its way to the server; the watch ends before anything fires (a dispatcher
    // drained, say): the poll still takes the next fire.
    unwatch();
    await store.transact((tx) => tx.schedule('watched/1', new Date(Date.now() - 1000), msg('w')));
    // The ended watch's poll is the only one waiting: the consumer's first delivery goes to it.
    const { io } = await storeAdapterOn(namespace);
    const l = layout(namespace);
    await waitFor('the fire delivered to the ended watch', async () => {
      const info = await io.jsm.consumers.info(l.storeStream, l.firesConsumer);
      return info.delivered.consumer_seq >= 1;
    });
    const other = await adapterOf(namespace);
    let claimed: Schedule[] = [];
    await waitFor('the schedule claimed elsewhere', async () => {
      claimed = await deliver(other, new Date(), 10);
      return claimed.length > 0;
    });
    expect(claimed.map((s) => s.key)).toEqual(['watched/1']);
    // Given back as a fresh fire, not sent back with a count above one (what a lapsed claim looks like).
    expect((claimed[0] as Schedule & { interrupted?: boolean }).interrupted).toBeUndefined();
    expect(await store.loadSchedule('watched/1')).toBeUndefined();
  }, 60_000);

  it('delivers each schedule from its fire once, drops stale fires, and purges the fires it acknowledged', async () => {
    const backend = await open();
    const { store } = backend;
    const adapter = await adapterOf(backend.namespace);
    const past = Date.now() - 10_000;
    await store.transact(async (tx) => {
      for (let i = 0; i < 50; i++) await tx.schedule(`gone/${i}`, new Date(past + (i % 5) * 1000), msg('g'));
    });
    // Fired already: the fires of the cancelled and the replaced ones are stale.
    await waitFor('the first timers to fire', async () => (await subjectsByKind(backend.namespace)).has('f'));
    await store.transact(async (tx) => {
      for (let i = 0; i < 10; i++) await tx.cancelSchedule(`gone/${i}`);
      for (let i = 10; i < 20; i++) await tx.schedule(`gone/${i}`, new Date(past + 2500), msg('g'));
    });
    const delivered: string[] = [];
    await waitFor('40 schedules delivered', async () => {
      delivered.push(...(await deliver(adapter, new Date(), 100)).map((s) => s.key));
      return delivered.length >= 40;
    });
    expect(new Set(delivered).size).toBe(40);
    expect(delivered.filter((k) => Number(k.split('/')[1]) < 10)).toEqual([]);
    // Nothing more comes: every fire left is stale.
    expect(await deliver(adapter, new Date(), 100)).toEqual([]);
    expect(await store.nextDueAt()).toBeUndefined();
    await waitFor(
      'the fires to be purged',
      async () => {
        await deliver(adapter, new Date(), 100);
        const kinds = await subjectsByKind(backend.namespace);
        return !kinds.has('f') && !kinds.has('q') && !kinds.has('h') && !kinds.has('c');
      },
      { timeoutMs: 30_000 },
    );
  }, 60_000);

  it('keeps an aggregate’s events gapless when instances append concurrently (conflicts re-run)', async () => {
    const first = await open();
    const second = await open(first.namespace);
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        (i % 2 ? first : second).store.transact(
          (tx) => tx.exec(counter, 'shared-counter', (_s, ag) => ag.raise('added', { i })),
          // Each of the 30 may lose to every other once: enough re-runs that none gives up on a slow machine.
          { maxRetries: 30 },
        ),
      ),
    );
    const events = await first.store.loadEvents('shared-counter');
    expect(events.map((e) => e.sequence)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(new Set(events.map((e) => (e.data as { i: number }).i)).size).toBe(30);
  });

  it('numbers versions by stream sequence: they only grow per key, across consumption and replacement', async () => {
    const { store, namespace } = await open();
    const adapter = await adapterOf(namespace);
    const versions: number[] = [];
    for (let round = 0; round < 3; round++) {
      await adapter.commit(await adapter.begin(), {
        writes: [{ op: 'put', key: 'v/1', at: new Date(Date.now() - 1000), message: msg('v') }],
        settlements: [],
      });
      versions.push((await store.loadSchedule('v/1'))!.version);
      const claimed: Schedule[] = [];
      await waitFor('its fire', async () => {
        claimed.push(...(await deliver(adapter, new Date(), 10)));
        return claimed.length > 0;
      });
      expect(claimed.map((s) => s.key)).toEqual(['v/1']);
      expect(await store.loadSchedule('v/1')).toBeUndefined();
    }
    expect(versions).toEqual([...versions].sort((a, b) => a - b));
    expect(new Set(versions).size).toBe(3);
  });

  it('delivers schedules replaced just as their timers fire (a timer the server lost is written again)', async () => {
    // See test/timer-replaced-as-it-fires.test.ts: the server may drop a timer that replaces one as it fires.
    const backend = await open();
    const { store } = backend;
    const delivered = new Map<string, unknown[]>();
    const controller = new AbortController();
    const running = new Dispatcher({
      store,
      processor: async (_tx, m, { schedule }) => {
        delivered.set(schedule.key, [...(delivered.get(schedule.key) ?? []), (m.data as { v: number }).v]);
      },
    }).run(controller.signal);
    const n = 120;
    const first = Date.now() + 1500;
    await store.transact(async (tx) => {
      for (let i = 0; i < n; i++)
        await tx.schedule(`race/${i}`, new Date(first + i * 20), msg('r', { v: 1 }));
    });
    const replacing: Promise<unknown>[] = [];
    for (let i = 0; i < n; i++) {
      // Between the instant its timer fires (500 ms before it is due) and 30 ms after.
      const at = first + i * 20 - 500 + (i % 7) * 5;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));
      replacing.push(
        store.transact((tx) => tx.schedule(`race/${i}`, new Date(Date.now() + 1500), msg('r', { v: 2 }))),
      );
    }
    await Promise.all(replacing);
    await waitFor(
      'every replacement delivered',
      () => Array.from({ length: n }, (_, i) => delivered.get(`race/${i}`)?.includes(2)).every(Boolean),
      { timeoutMs: 30_000 },
    );
    controller.abort();
    await running;
    expect(await store.nextDueAt()).toBeUndefined();
    // A replaced one was delivered at most before its replacement, never after it.
    for (const [key, versions] of delivered) expect(versions.at(-1), key).toBe(2);
  }, 60_000);

  it('looks at a lost timer again when the process that found its stale fire dies before it looked', async () => {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace, { claims: { ttlMs: 1000 } });
    backends.push(backend);
    const l = layout(namespace);
    await backend.store.transact((tx) => tx.schedule('lost/1', new Date(Date.now() + 2500), msg('l')));
    // The server lost the schedule's timer (as when a timer replaces one just as it fires) and a fire of
    // the key's earlier timer comes: the trace that makes a process look at the timer.
    // Its look comes long after the test closed it: it dies before it looked, however slow the machine.
    const { adapter: dying, io } = await storeAdapterOn(namespace, {
      claimTtlMs: 1000,
      timerCheckDelayMs: 60_000,
    });
    await io.purge(l.storeStream, { filter: l.timer('lost/1') });
    await io.publish(l.fire('lost/1'), '', {
      headers: { [H.timer]: 'earlier', [H.due]: String(Date.now() - 10) },
    });
    const unit = await dying.begin({ now: new Date(), limit: 10 });
    expect(unit.claimed).toEqual([]);
    // It dies before it looks: the fire comes again to another process, which looks.
    await io.nc.close();
    const delivered: string[] = [];
    const controller = new AbortController();
    const running = new Dispatcher({
      store: backend.store,
      processor: async (_tx, _m, { schedule }) => {
        delivered.push(schedule.key);
      },
    }).run(controller.signal);
    await waitFor('the schedule delivered after its timer was written again', () => delivered.length > 0, {
      timeoutMs: 20_000,
    });
    controller.abort();
    await running;
    expect(delivered).toEqual(['lost/1']);
    expect(await backend.store.nextDueAt()).toBeUndefined();
  }, 60_000);

  it('keeps no claim of a delivery whose server clock could not be read (an outage as it claims)', async () => {
    const backend = await open();
    let clockDown = true;
    const { adapter } = await storeAdapterOn(backend.namespace, {
      serverLatest: async () => {
        if (clockDown) throw new Error('the server clock cannot be read');
        return Date.now();
      },
    });
    await backend.store.transact((tx) => tx.schedule('clock/1', new Date(Date.now() - 1000), msg('c')));
    await waitFor('its timer to fire', async () => (await subjectsByKind(backend.namespace)).has('f'));
    // The delivery claims the fire, then looks at the server's clock, which an outage keeps from it.
    const delivered: string[] = [];
    await waitFor('clock/1 delivered', async () => {
      try {
        delivered.push(...(await deliver(adapter, new Date(), 10)).map((s) => s.key));
      } finally {
        clockDown = false;
      }
      return delivered.includes('clock/1');
    });
    expect(delivered).toEqual(['clock/1']);
    expect(await backend.store.loadSchedule('clock/1')).toBeUndefined();
  }, 60_000);

  it('delivers schedules whose claims lapsed together: each recorded as interrupted, then delivered alone', async () => {
    const n = 54;
    const backend = await lapsedClaims('lapsed', n);
    const attempts = new Map<string, number[]>();
    const controller = new AbortController();
    // Several batches at once (concurrency 4): a batch that sends the ones to run alone back while another
    // claims must not keep the dispatcher claiming them by the batch (it did, sending them back without end).
    const running = new Dispatcher({
      store: backend.store,
      concurrency: 4,
      rescanInterval: 100,
      retryDelay: 20,
      processor: async (tx, _m, { schedule, attempt }) => {
        await tx.exec(counter, `runs-${schedule.key}`, (_count, ag) => ag.raise('added', {}));
        attempts.set(schedule.key, [...(attempts.get(schedule.key) ?? []), attempt]);
      },
    }).run(controller.signal);
    try {
      await waitFor('every schedule delivered', async () => (await backend.store.countSchedules()) === 0, {
        timeoutMs: 30_000,
      });
    } finally {
      controller.abort();
      await running;
    }
    expect(attempts.size).toBe(n);
    // The lapsed claim counts as an attempt (recorded as interrupted); the next one runs.
    for (const [key, runs] of attempts) expect(runs, key).toEqual([2]);
  }, 60_000);

  it('delivers schedules to be run alone while new ones keep falling due (a claim order not by due time)', async () => {
    const n = 30;
    const backend = await lapsedClaims('alone', n);
    const delivered = new Set<string>();
    const controller = new AbortController();
    const running = new Dispatcher({
      store: backend.store,
      concurrency: 4,
      retryDelay: 50,
      processor: async (_tx, _m, { schedule }) => {
        delivered.add(schedule.key);
      },
    }).run(controller.signal);
    // Meanwhile, new schedules keep falling due (a calendar catching up, say): one every 10 ms.
    let producing = true;
    let made = 0;
    const producer = (async () => {
      while (producing) {
        await backend.store.transact((tx) => tx.schedule(`new/${made++}`, new Date(), msg('n')));
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const alone = () =>
      Array.from({ length: n }, (_, i) => delivered.has(`alone/${i}`)).filter(Boolean).length;
    try {
      await waitFor('the ones to run alone delivered while new ones keep coming', () => alone() === n, {
        timeoutMs: 20_000,
      });
    } finally {
      producing = false;
      await producer;
      await waitFor('the rest delivered', async () => (await backend.store.countSchedules()) === 0, {
        timeoutMs: 30_000,
      }).catch(() => undefined);
      controller.abort();
      await running;
    }
    expect(alone()).toBe(n);
    expect(made).toBeGreaterThan(0);
  }, 90_000);

  it('runs each occurrence of a recurring schedule once between two dispatchers of two instances', async () => {
    const first = await open();
    const second = await open(first.namespace);
    const runs: number[] = [];
    const start = new Date(Date.now() + 1000);
    await first.store.transact((tx) =>
      tx.schedule(
        'tick',
        recurring(intervalFrom(1000, start), { startAt: start, maxOccurrences: 6 }),
        msg('t'),
      ),
    );
    const controller = new AbortController();
    const running = [first, second].map((b) =>
      new Dispatcher({
        store: b.store,
        processor: async (_tx, _m, { occurrence }) => {
          runs.push(occurrence!.number);
        },
      }).run(controller.signal),
    );
    await waitFor('six occurrences', async () => (await first.store.loadSchedule('tick')) === undefined, {
      timeoutMs: 30_000,
    });
    // A last look for a repeat: a second run would come within a claim's time.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    controller.abort();
    await Promise.all(running);
    expect(runs.sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
  }, 60_000);

  it('tells other instances of schedules as they fall due, with the due instant, and not before', async () => {
    const first = await open();
    const second = await open(first.namespace);
    const changes: StoreChange[] = [];
    const stop = first.store.onChange((change) => changes.push(change));
    await waitFor('the channel to be live', () => first.store.watching);
    const at = new Date(Date.now() + 1500);
    const later = new Date(Date.now() + HOUR);
    await second.store.transact(async (tx) => {
      await tx.schedule('wake/later', later, msg('w'));
      await tx.schedule('wake/1', at, msg('w'));
    });
    // The channel's own reports (`live`) are remote changes too, without a deadline; so are its looks
    // for lapsed claims.
    const due = () => changes.filter((c) => c.remote && c.earliest !== undefined);
    await waitFor('a schedule falling due', () => due().length > 0);
    expect(due().map((c) => c.earliest)).toEqual([at]);
    // Fired ahead of its due instant (fireAheadMs), never more.
    expect(Date.now()).toBeGreaterThanOrEqual(at.getTime() - 500);
    stop();
  });

  it('holds the fires of schedules about to fall due: the delivery at each due instant asks the consumer nothing', async () => {
    const { store } = await open();
    const ran: { key: string; at: number; due: number }[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async (_tx, _message, { schedule }) =>
        void ran.push({ key: schedule.key, at: Date.now(), due: schedule.dueAt.getTime() }),
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the channel to be live', () => store.watching);
    // Every pull that does not wait (a delivery's look at the consumer, or the watch taking a backlog).
    const pull = vi.spyOn(NatsIo.prototype, 'pullNow');
    const looks = () => pull.mock.calls.filter(([, , , waitMs]) => !waitMs).length;
    try {
      const base = Date.now() + 1500;
      await store.transact(async (tx) => {
        for (let i = 0; i < 5; i++) await tx.schedule(`held/${i}`, new Date(base + i * 150), msg('h'));
      });
      await waitFor('every schedule delivered', () => ran.length === 5);
      // Fired fireAheadMs early and held by the watch, each ran at its due instant, not before, and the
      // deliveries did not look for them: before, every delivery looked (10 looks for these 5). A look
      // is still right when a fire comes in after its due instant or two come together (a server slowed
      // by a loaded machine): fewer than one per delivery, whatever the load.
      expect(ran.map((r) => r.key)).toEqual(['held/0', 'held/1', 'held/2', 'held/3', 'held/4']);
      for (const r of ran) expect(r.at).toBeGreaterThanOrEqual(r.due);
      expect(looks()).toBeLessThan(ran.length);
    } finally {
      pull.mockRestore();
      ac.abort();
      await done;
    }
  });
});
