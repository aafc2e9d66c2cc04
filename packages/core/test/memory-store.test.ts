import { describe, expect, it } from 'vitest';
import {
  aggregate,
  ConflictError,
  createMemoryBackend,
  createStore,
  Dispatcher,
  InvalidArgumentError,
  ManualClock,
  MemoryDatabase,
  memoryAdapter,
  NotSupportedError,
} from '../src/index.js';

const order = aggregate({
  type: 'order',
  initial: { status: 'none' as string },
  apply: {
    'order.placed': (s) => ({ ...s, status: 'pending' }),
    'order.expired': (s) => ({ ...s, status: 'expired' }),
  },
});

describe('memory store', () => {
  it('commits an aggregate change and a schedule together, and the dispatcher consumes it', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const backend = createMemoryBackend({ clock });
    const { store } = backend;
    await store.transact(async (tx) => {
      await tx.exec(order, 'ORD-1', (_s, ag) => ag.raise('order.placed'));
      await tx.schedule('order/ORD-1/expire', new Date(clock.now() + 60_000), {
        type: 'order.expire',
        aggregateId: 'ORD-1',
      });
    });
    expect((await store.loadSchedule('order/ORD-1/expire'))?.version).toBe(1);
    const seen: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      processor: async (tx, message) => {
        seen.push(message.type);
        await tx.exec(order, message.aggregateId!, (s, ag) => {
          if (s.status === 'pending') ag.raise('order.expired');
        });
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(59_000);
    expect(seen).toEqual([]);
    await clock.advance(1_000);
    expect(seen).toEqual(['order.expire']);
    expect(await store.loadSchedule('order/ORD-1/expire')).toBeUndefined();
    expect((await store.loadEvents('ORD-1')).map((e) => e.type)).toEqual(['order.placed', 'order.expired']);
    ac.abort();
    await done;
    await backend.close();
  });

  it('rejects a bad key with a typed error and commits nothing', async () => {
    const { store } = createMemoryBackend();
    await expect(
      store.transact(async (tx) => {
        await tx.schedule('ok', new Date(), { type: 't', aggregateId: 'a' });
        await tx.schedule('', new Date(), { type: 't', aggregateId: 'a' });
      }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.loadSchedule('ok')).toBeUndefined();
    expect(ConflictError).toBeDefined();
  });

  it('refuses to join an outside transaction, which only SQL backends can, and runs nothing', async () => {
    const { store } = createMemoryBackend();
    let ran = false;
    const joined = store.join({}, async () => {
      ran = true;
    });
    await expect(joined).rejects.toBeInstanceOf(NotSupportedError);
    await expect(joined).rejects.toThrow(/store\.transact/);
    expect(ran).toBe(false);
  });

  it('ends a delivery whose schedules were all released unchanged: its commit ends their claims', async () => {
    const adapter = memoryAdapter(new MemoryDatabase());
    const store = createStore(adapter);
    await store.transact((tx) => tx.schedule('back/1', new Date(0), { type: 't', aggregateId: 'a' }));
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    expect(unit.claimed?.map((s) => s.key)).toEqual(['back/1']);
    const held = await adapter.begin({ now: new Date(), limit: 10 });
    expect(held.claimed).toEqual([]);
    await adapter.rollback(held);
    expect(
      await adapter.commit(unit, {
        writes: [],
        settlements: [{ schedule: unit.claimed![0]!, outcome: 'release', writes: [] }],
      }),
    ).toEqual(new Map());
    const again = await adapter.begin({ now: new Date(), limit: 10 });
    expect(again.claimed?.map((s) => s.key)).toEqual(['back/1']);
    expect(again.claimed?.[0]?.interrupted).toBeUndefined();
    await adapter.rollback(again);
  });

  it("reports a claim whose holder died as interrupted, and refuses the dead holder's late commit", async () => {
    const database = new MemoryDatabase();
    const adapter = memoryAdapter(database);
    const store = createStore(adapter);
    await store.transact((tx) => tx.schedule('crash/1', new Date(0), { type: 't' }));
    const dead = await adapter.begin({ now: new Date(), limit: 10 });
    database.crash();
    const next = await adapter.begin({ now: new Date(), limit: 10 });
    expect(next.claimed?.map((s) => [s.key, s.interrupted])).toEqual([['crash/1', true]]);
    const late = await adapter.commit(dead, {
      writes: [],
      settlements: [{ schedule: dead.claimed![0]!, outcome: 'consume', writes: [] }],
    });
    expect(late?.get('crash/1')).toBeInstanceOf(ConflictError);
    expect(await store.loadSchedule('crash/1')).toBeDefined();
    await adapter.rollback(next);
  });
});
