import { freshNamespace } from '@duetime/conformance';
import { type Backend, Dispatcher, type Message } from '@duetime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { bucketOf } from '../src/layout.js';
import type { NatsStoreAdapter } from '../src/store/adapter.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { closeStoreAdapters, storeAdapterOn } from './store-adapter.js';

/**
 * Several processes draining one backlog spread over it: a delivery that knows of other processes takes
 * its schedules from one due second of its own (picked among the earliest), so processes rarely claim the
 * same schedules; and whatever they meet, every schedule runs once.
 */

const msg = (id: string): Message => ({ type: 'test', aggregateId: id });

/** A store adapter that claims every delivery and spreads (mode `always`), on a connection of its own. */
async function spreadingAdapter(namespace: string): Promise<NatsStoreAdapter> {
  return (await storeAdapterOn(namespace, { claims: { mode: 'always', ttlMs: 5000 } })).adapter;
}

/** `perSecond` schedules in each of `seconds` consecutive due seconds, a minute in the past. */
async function backlog(backend: Backend, seconds: number, perSecond: number): Promise<string[]> {
  const base = Math.floor((Date.now() - 60_000) / 1000) * 1000;
  const keys: string[] = [];
  await backend.store.transact(async (tx) => {
    for (let s = 0; s < seconds; s++)
      for (let i = 0; i < perSecond; i++) {
        const key = `b/${s}/${i}`;
        keys.push(key);
        await tx.schedule(key, new Date(base + s * 1000 + i), msg(key));
      }
  });
  return keys;
}

describe('nats due index, several processes draining one backlog', () => {
  const backends: Backend[] = [];
  async function open(): Promise<Backend & { namespace: string }> {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace, { claims: 'always' });
    backends.push(backend);
    return Object.assign(backend, { namespace });
  }
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
    await closeStoreAdapters();
  });
  afterAll(deleteOpened, 60_000);

  it('has two spreading processes take their schedules from different due seconds', async () => {
    const backend = await open();
    await backlog(backend, 6, 20);
    const a = await spreadingAdapter(backend.namespace);
    const b = await spreadingAdapter(backend.namespace);
    const secondsOf = (claimed: readonly { dueAt: Date }[] | undefined) =>
      new Set(
        (claimed ?? []).map((s) => {
          const at = bucketOf(s.dueAt.getTime());
          return `${at.hour}.${at.second}`;
        }),
      );
    const first = await a.begin({ now: new Date(), limit: 10 });
    // b may pick a's second and meet a's claims there (then it takes none); it then avoids that second.
    let other = await b.begin({ now: new Date(), limit: 10 });
    if (other.claimed?.length === 0) {
      await b.rollback(other);
      other = await b.begin({ now: new Date(), limit: 10 });
    }
    try {
      expect(first.claimed).toHaveLength(10);
      expect(other.claimed).toHaveLength(10);
      const mine = secondsOf(first.claimed);
      const theirs = secondsOf(other.claimed);
      expect(mine.size).toBe(1);
      expect(theirs.size).toBe(1);
      expect([...theirs][0]).not.toBe([...mine][0]);
    } finally {
      await a.rollback(first);
      await b.rollback(other);
    }
  });

  it('runs every schedule of a backlog once when three dispatchers drain it', async () => {
    const backend = await open();
    const keys = await backlog(backend, 5, 60);
    const drainers = [
      backend,
      await openOn(NATS_STORE_URL, backend.namespace, { claims: 'always' }),
      await openOn(NATS_STORE_URL, backend.namespace, { claims: 'always' }),
    ];
    backends.push(...drainers.slice(1));
    const runs = new Map<string, number>();
    const controller = new AbortController();
    const dispatchers = drainers.map(
      (b) =>
        new Dispatcher({
          store: b.store,
          batchSize: 25,
          processor: async (_tx, message) => {
            const key = message.aggregateId ?? '';
            runs.set(key, (runs.get(key) ?? 0) + 1);
          },
        }),
    );
    const running = dispatchers.map((d) => d.run(controller.signal));
    const deadline = Date.now() + 60_000;
    while (runs.size < keys.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    await Promise.all(running);
    expect(runs.size).toBe(keys.length);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    const left = await backend.store.pageSchedules({ limit: 1 });
    expect(left.items).toEqual([]);
  }, 90_000);
});
