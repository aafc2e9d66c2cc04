import { aggregate, CorruptDataError } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { message, openAdapter, redisFixture } from './helpers.js';

const fx = redisFixture();
const HOUR = 3_600_000;
const counter = aggregate({ type: 'counter', initial: 0, apply: { counted: (n: number) => n + 1 } });

describe('keys of the wrong type under the prefix', () => {
  it('names the schedules key when it holds a string, and never overwrites it', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    await fx.admin.set(k.schedules, 'not a hash');
    const expectCorrupt = async (promise: Promise<unknown>) => {
      const error = await promise.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(CorruptDataError);
      expect((error as Error).message).toContain(k.schedules);
      expect((error as CorruptDataError).code).toBe('DUETIME_CORRUPT_DATA');
    };
    await expectCorrupt(store.loadSchedule('a'));
    await expectCorrupt(store.transact((tx) => tx.schedule('a', new Date(Date.now() + HOUR), message('a'))));
    await expectCorrupt(store.listSchedules());
    const adapter = await openAdapter(fx, prefix);
    await expectCorrupt(store.nextDueAt());
    await expectCorrupt(adapter.begin({ now: new Date(), limit: 10 }));
    expect(await fx.admin.get(k.schedules)).toBe('not a hash');
    expect(await fx.admin.exists(k.version, k.due, k.at, k.index)).toBe(0);
  });

  it('names a version counter that is not a non-negative integer, writing nothing and leaving it as it was', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const put = () => store.transact((tx) => tx.schedule('a', new Date(Date.now() + HOUR), message('a')));
    for (const [write, expected] of [
      [() => fx.admin.set(k.version, 'seven'), 'seven'],
      [() => fx.admin.set(k.version, '-3'), '-3'],
      [() => fx.admin.del(k.version).then(() => fx.admin.lpush(k.version, 'x')), undefined],
    ] as const) {
      await write();
      const error = await put().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CorruptDataError);
      expect((error as Error).message).toContain(k.version);
      if (expected !== undefined) expect(await fx.admin.get(k.version)).toBe(expected);
      else expect(await fx.admin.lrange(k.version, 0, -1)).toEqual(['x']);
      expect(await fx.admin.exists(k.schedules, k.due, k.at, k.index)).toBe(0);
      await fx.admin.del(k.version);
    }
    await put();
    expect((await store.loadSchedule('a'))?.version).toBe(1);
  });

  it('names the due index, an event list, a lease and a cursor of the wrong type', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const k = fx.keys(prefix);
    await fx.admin.hset(k.due, 'x', '1');
    await expect(backend.store.nextDueAt()).rejects.toThrow(k.due);
    await expect(
      backend.store.transact((tx) => tx.schedule('a', new Date(), message('a'))),
    ).rejects.toBeInstanceOf(CorruptDataError);
    expect(await fx.admin.hget(k.due, 'x')).toBe('1');
    await fx.admin.del(k.due);

    await fx.admin.set(k.events('agg'), 'oops');
    await expect(backend.store.loadEvents('agg')).rejects.toThrow(k.events('agg'));
    const commit = backend.store.transact(async (tx) => {
      await tx.schedule('c', new Date(), message('c'));
      await tx.exec(counter, 'agg', (_s, ag) => ag.raise('counted'));
    });
    await expect(commit).rejects.toThrow(k.events('agg'));
    expect(await backend.store.loadSchedule('c')).toBeUndefined();
    expect(await fx.admin.get(k.events('agg'))).toBe('oops');

    await fx.admin.rpush(k.events('bad-json'), '{not json');
    await expect(backend.store.loadEvents('bad-json')).rejects.toBeInstanceOf(CorruptDataError);

    await fx.admin.lpush(k.lease('l'), 'x');
    await expect(backend.leases.acquire('l', 'me', 1000)).rejects.toThrow(k.lease('l'));
    await expect(backend.leases.holder('l')).rejects.toBeInstanceOf(CorruptDataError);
    await fx.admin.set(k.lease('m'), 'garbage');
    await expect(backend.leases.renew('m', 'me', 1, 1000)).rejects.toThrow(k.lease('m'));

    await fx.admin.sadd(k.cursor('c'), 'x');
    await expect(backend.cursors.read('c')).rejects.toThrow(k.cursor('c'));
    await expect(backend.cursors.advance('c', new Date(), 1000)).rejects.toBeInstanceOf(CorruptDataError);
    await fx.admin.set(k.cursor('d'), 'yesterday');
    await expect(backend.cursors.read('d')).rejects.toThrow(k.cursor('d'));
    expect(await fx.admin.get(k.cursor('d'))).toBe('yesterday');
  });

  it('names the field holding a value that is not a schedule', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    await fx.admin.hset(k.schedules, 'weird', 'hello');
    await expect(store.loadSchedule('weird')).rejects.toThrow(/field "weird"/);
    await fx.admin.zadd(k.due, Date.now() - 1000, 'weird');
    const adapter = await openAdapter(fx, prefix);
    await expect(adapter.begin({ now: new Date(), limit: 10 })).rejects.toThrow('weird');
    // Nothing was claimed: the entry is due as it was.
    expect(Number(await fx.admin.zscore(k.due, 'weird'))).toBeLessThan(Date.now());
    expect(await fx.admin.exists(k.claims)).toBe(0);
    expect(await fx.admin.hget(k.schedules, 'weird')).toBe('hello');
  });

  it('puts a claimed page back when a message in it is not duetime’s', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const due = Date.now() - 1000;
    await store.transact((tx) => tx.schedule('fine', new Date(due - 1), message('f')));
    await fx.admin.hset(k.schedules, 'bad-json', `99 ${due} ${due} 0 {not json`);
    await fx.admin.zadd(k.due, due, 'bad-json');
    const adapter = await openAdapter(fx, prefix);
    await expect(adapter.begin({ now: new Date(), limit: 10 })).rejects.toThrow(/field "bad-json"/);
    expect(await fx.admin.exists(k.claims)).toBe(0);
    expect(Number(await fx.admin.zscore(k.due, 'bad-json'))).toBe(due);
    expect(Number(await fx.admin.zscore(k.due, 'fine'))).toBe(due - 1);
  });
});
