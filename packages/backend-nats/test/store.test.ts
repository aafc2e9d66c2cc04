import { freshNamespace, waitFor } from '@duetime/conformance';
import { aggregate, type Backend, type Message, type StoreChange } from '@duetime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { deleteOpened, NATS_URL, openOn } from './adapter.js';

const HOUR = 3_600_000;
const counter = aggregate({ type: 'counter', initial: 0, apply: { added: (n: number) => n + 1 } });
const msg = (id: string, data?: unknown): Message => ({
  type: 'test',
  aggregateId: id,
  ...(data ? { data } : {}),
});

/** Resolves when released; lets two transactions interleave at chosen points. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
}

describe('nats store driver', () => {
  const backends: Backend[] = [];
  async function open(namespace = freshNamespace()): Promise<Backend & { namespace: string }> {
    const backend = await openOn(NATS_URL, namespace);
    backends.push(backend);
    return Object.assign(backend, { namespace });
  }
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
  });
  afterAll(deleteOpened, 60_000);

  it('is serializable: two transactions that each act on having read the other’s key absent never both commit', async () => {
    const first = await open();
    const second = await open(first.namespace);
    // Invariant: at most one of shift/a and shift/b. Each transaction reads the other's key, waits until
    // both have read, then takes its own. Snapshot isolation would let both commit (write skew).
    const bothRead = [gate(), gate()];
    const take = (backend: Backend, mine: string, other: string, index: number) => {
      let runs = 0;
      return backend.store
        .transact(async (tx) => {
          runs++;
          const taken = await tx.loadSchedule(other);
          if (runs === 1) {
            bothRead[index]?.open();
            await Promise.all(bothRead.map((g) => g.opened));
          }
          if (!taken) await tx.schedule(mine, new Date(Date.now() + HOUR), msg(mine));
        })
        .then(() => runs);
    };
    const runs = await Promise.all([
      take(first, 'shift/a', 'shift/b', 0),
      take(second, 'shift/b', 'shift/a', 1),
    ]);
    const keys = (await first.store.listSchedules()).map((s) => s.key);
    expect(keys).toHaveLength(1);
    // The transaction that lost was re-run and saw the winner's key.
    expect(runs.sort()).toEqual([1, 2]);
  });

  it('validates what a prefix cancellation counted: a key added under the prefix concurrently forces a re-run', async () => {
    const first = await open();
    const second = await open(first.namespace);
    const at = new Date(Date.now() + HOUR);
    await first.store.transact(async (tx) => {
      for (const key of ['p/1', 'p/2', 'p/3']) await tx.schedule(key, at, msg(key));
    });
    const counted = gate();
    const added = gate();
    const counts: number[] = [];
    const cancelling = first.store.transact(async (tx) => {
      const n = await tx.cancelSchedulePrefix('p/');
      counts.push(n);
      if (counts.length === 1) {
        counted.open();
        await added.opened;
      }
      return n;
    });
    await counted.opened;
    await second.store.transact((tx) => tx.schedule('p/new', at, msg('p/new')));
    added.open();
    const returned = await cancelling;
    // The first count (3) missed p/new, which committed first; the re-run counted and cancelled all four.
    expect(counts).toEqual([3, 4]);
    expect(returned).toBe(4);
    expect(await first.store.listSchedules()).toEqual([]);
  });

  it('pages through thousands of schedules across many index nodes in (at, key) order, by due time too', async () => {
    const { store } = await open();
    const base = Date.now() + HOUR;
    const count = 1500;
    for (let batch = 0; batch < count; batch += 500)
      await store.transact(async (tx) => {
        for (let i = batch; i < batch + 500; i++)
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
    // The due index: earliest first, and a failure record moves one schedule behind the others.
    const first = (await store.driver.dueSchedules(new Date(base), 1000)).map((s) => s.key);
    expect(first).toEqual(seen.filter((s) => s.at === base).map((s) => s.key));
    const moved = (await store.loadSchedule(first[0] as string))!;
    expect(
      await store.driver.recordFailure(moved.key, moved.version, {
        attempts: 1,
        dueAt: new Date(base + 500),
        error: 'x',
      }),
    ).toBe(true);
    expect(
      await store.driver.recordFailure(moved.key, moved.version + 1, {
        attempts: 1,
        dueAt: new Date(base),
        error: 'x',
      }),
    ).toBe(false);
    const due = (await store.driver.dueSchedules(new Date(base + 500), 1000)).map((s) => s.key);
    expect(due).toEqual([...first.slice(1), moved.key]);
    expect(await store.driver.nextDueAt()).toEqual(new Date(base));
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('page/'))).toBe(count);
    expect(await store.driver.nextDueAt()).toBeUndefined();
  }, 120_000);

  it('commits a transaction larger than one NATS message, all or nothing, and cleans up its parts', async () => {
    const backend = await open();
    const { store } = backend;
    const big = 'z'.repeat(250_000);
    await store.transact(async (tx) => {
      for (let i = 0; i < 6; i++)
        await tx.schedule(`big/${i}`, new Date(Date.now() + HOUR), msg(`big${i}`, big));
      await tx.exec(counter, 'big-counter', (_s, ag) => ag.raise('added', { big }));
    });
    const loaded = await store.listSchedules();
    expect(loaded.map((s) => s.key)).toEqual(['big/0', 'big/1', 'big/2', 'big/3', 'big/4', 'big/5']);
    expect(loaded.every((s) => s.message.data === big)).toBe(true);
    expect((await store.loadEvents('big-counter'))[0]?.data).toEqual({ big });
    await expect(
      store.transact(async (tx) => {
        for (let i = 0; i < 6; i++) await tx.schedule(`big2/${i}`, new Date(), msg(`b${i}`, big));
        throw new Error('abandon');
      }),
    ).rejects.toThrow('abandon');
    expect(await store.listSchedules()).toHaveLength(6);
    // The parts of the applied transaction are removed from the log.
    const nc = await connectNats(NATS_URL);
    try {
      const io = await NatsIo.open(nc, 5000);
      const l = layout(backend.namespace);
      await waitFor('the log to keep only its anchor and last commit', async () => {
        const info = await io.jsm.streams.info(l.logStream);
        return info.state.messages <= 2;
      });
    } finally {
      await nc.close();
    }
  });

  it('keeps an aggregate’s events gapless when instances append concurrently (conflicts re-run)', async () => {
    const first = await open();
    const second = await open(first.namespace);
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        (i % 2 ? first : second).store.transact((tx) =>
          tx.exec(counter, 'shared-counter', (_s, ag) => ag.raise('added', { i })),
        ),
      ),
    );
    const events = await first.store.loadEvents('shared-counter');
    expect(events.map((e) => e.sequence)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(new Set(events.map((e) => (e.data as { i: number }).i)).size).toBe(30);
  });

  it('tells other instances about commits that schedule, with the earliest deadline', async () => {
    const first = await open();
    const second = await open(first.namespace);
    const changes: StoreChange[] = [];
    const stop = first.store.onChange((change) => changes.push(change));
    const at = new Date(Date.now() + HOUR);
    await second.store.transact(async (tx) => {
      await tx.schedule('wake/2', new Date(at.getTime() + 5), msg('w'));
      await tx.schedule('wake/1', at, msg('w'));
    });
    await waitFor('a remote change', () => changes.some((c) => c.remote));
    expect(changes.find((c) => c.remote)?.earliest).toEqual(at);
    stop();
  });
});
