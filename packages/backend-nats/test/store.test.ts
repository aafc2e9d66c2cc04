import { freshNamespace, waitFor } from '@duetime/conformance';
import {
  aggregate,
  type Backend,
  type Message,
  type Schedule,
  type Settlement,
  type StoreChange,
} from '@duetime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import type { NatsStoreAdapter } from '../src/store/adapter.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { closeStoreAdapters, storeAdapterOn } from './store-adapter.js';

const HOUR = 3_600_000;
const counter = aggregate({ type: 'counter', initial: 0, apply: { added: (n: number) => n + 1 } });
const msg = (id: string, data?: unknown): Message => ({
  type: 'test',
  aggregateId: id,
  ...(data ? { data } : {}),
});

/** The subjects of the store stream that hold messages, by kind (`s`, `q`, `h`, `e`, `x`, `meta`). */
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
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
    await closeStoreAdapters();
  });
  afterAll(deleteOpened, 60_000);

  it('pages through thousands of schedules in (at, key) order, and answers the due index by due time', async () => {
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

    // The due index: the first second's schedules, and nothing of later seconds.
    const dueBy = async (at: Date) =>
      (await store.pageSchedules({ order: 'due', through: at, limit: 1000 })).items.map((s) => s.key);
    const first = await dueBy(new Date(base));
    expect(first.sort()).toEqual(seen.filter((s) => s.at === base).map((s) => s.key));
    expect(await store.nextDueAt()).toEqual(new Date(base));
    // A failed attempt moves one schedule behind the others of its second, atomically with its part.
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

  it('removes the due index of what was delivered: no stale entries or hour markers stay behind', async () => {
    const backend = await open();
    const { store } = backend;
    const adapter = await adapterOf(backend.namespace);
    const past = Date.now() - 10_000;
    await store.transact(async (tx) => {
      for (let i = 0; i < 50; i++) await tx.schedule(`gone/${i}`, new Date(past + (i % 5) * 1000), msg('g'));
    });
    // Cancelled and replaced ones leave stale entries behind, too.
    await store.transact(async (tx) => {
      for (let i = 0; i < 10; i++) await tx.cancelSchedule(`gone/${i}`);
      for (let i = 10; i < 20; i++) await tx.schedule(`gone/${i}`, new Date(past + 2500), msg('g'));
    });
    let drained = 0;
    for (let round = 0; round < 10 && drained < 40; round++) {
      drained += (await deliver(adapter, new Date(), 100)).length;
    }
    expect(drained).toBe(40);
    expect(await store.nextDueAt()).toBeUndefined();
    await waitFor('the due index to be purged', async () => {
      const kinds = await subjectsByKind(backend.namespace);
      return !kinds.has('q') && !kinds.has('h');
    });
  });

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
      // Through the adapter that claims next: its due index knows of its own writes at once (another
      // instance's are announced by wake-ups, or found when its listing of the index expires).
      await adapter.commit(await adapter.begin(), {
        writes: [{ op: 'put', key: 'v/1', at: new Date(Date.now() - 1000), message: msg('v') }],
        settlements: [],
      });
      versions.push((await store.loadSchedule('v/1'))!.version);
      const claimed = await deliver(adapter, new Date(), 10);
      expect(claimed.map((s) => s.key)).toEqual(['v/1']);
      expect(await store.loadSchedule('v/1')).toBeUndefined();
    }
    expect(versions).toEqual([...versions].sort((a, b) => a - b));
    expect(new Set(versions).size).toBe(3);
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
    // The channel's own reports (`live`) are remote changes too, without a deadline.
    const commits = () => changes.filter((c) => c.remote && c.channel === undefined);
    await waitFor('a remote change', () => commits().length > 0);
    expect(commits()[0]?.earliest).toEqual(at);
    stop();
  });
});
