import { CorruptDataError, type Store } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { message, openAdapter, redisFixture } from './helpers.js';

const fx = redisFixture();

/** UTF-8 byte order, the order Redis keeps sorted-set members in. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** Dead-letters `keys` through one unit (each claimed, consumed and kept as a dead letter). */
async function deadLetter(store: Store<undefined>, keys: string[]): Promise<void> {
  const at = Date.now() - 60_000;
  await store.transact(async (tx) => {
    for (const key of keys) await tx.schedule(key, new Date(at), message(key, { k: key }));
  });
  const adapter = await openAdapter(fx, prefixOf.get(store)!);
  const unit = await adapter.begin({ now: new Date(), limit: keys.length });
  expect(unit.claimed).toHaveLength(keys.length);
  const settlements = unit.claimed!.map((schedule) => ({
    schedule,
    outcome: 'consume' as const,
    dead: { attempts: 3, error: `Error: ${schedule.key} ✗`, deadAt: new Date() },
    writes: [],
  }));
  expect(await adapter.commit(unit, { writes: [], settlements })).toEqual(new Map());
}

const prefixOf = new WeakMap<Store<undefined>, string>();

/** A backend's store on a new prefix. */
async function openStore(): Promise<{ store: Store<undefined>; prefix: string }> {
  const prefix = fx.prefix();
  const { store } = await fx.open(prefix);
  prefixOf.set(store, prefix);
  return { store, prefix };
}

describe('dead letters', () => {
  it('live in the dead-letter hash and its key index, consumed with their schedule in one commit', async () => {
    const { store, prefix } = await openStore();
    const k = fx.keys(prefix);
    await deadLetter(store, ['d/1']);
    const { version } = (await store.loadDeadLetter('d/1'))!;
    expect(await fx.admin.hexists(k.schedules, 'd/1')).toBe(0);
    expect(await fx.admin.zrange(k.deadIndex, 0, -1, 'WITHSCORES')).toEqual(['d/1', '0']);
    expect(JSON.parse((await fx.admin.hget(k.dead, 'd/1'))!)).toMatchObject({
      v: 1,
      version,
      attempts: 3,
      error: 'Error: d/1 ✗',
      message: message('d/1', { k: 'd/1' }),
    });
    // A later dead letter of the same key replaces it; discarding it removes both entries.
    await deadLetter(store, ['d/1']);
    expect((await store.loadDeadLetter('d/1'))!.version).toBeGreaterThan(version);
    expect(await fx.admin.zcard(k.deadIndex)).toBe(1);
    expect(await store.transact((tx) => tx.discardDeadLetter('d/1'))).toBe(true);
    expect(await fx.admin.exists(k.dead, k.deadIndex)).toBe(0);
    expect(await store.loadDeadLetter('d/1')).toBeUndefined();
  });

  it('list in key byte order under a literal prefix, page by page, whatever the metacharacters', async () => {
    const { store } = await openStore();
    const keys = ['a/[x]', 'a/%', 'a/_', 'a/*', 'a/b', 'a/ä', 'a/🙂', 'a/\u{e000}', 'ab', 'a', 'b/1', 'a/\\'];
    await deadLetter(store, keys);
    const all = (await store.pageDeadLetters({ limit: 100 })).items.map((d) => d.key);
    expect(all).toEqual([...keys].sort(byBytes));
    const under = keys.filter((key) => key.startsWith('a/')).sort(byBytes);
    const seen: string[] = [];
    let page = await store.pageDeadLetters({ prefix: 'a/', limit: 3 });
    for (;;) {
      expect(page.items.length).toBeLessThanOrEqual(3);
      seen.push(...page.items.map((d) => d.key));
      if (!page.next) break;
      page = await store.pageDeadLetters({ prefix: 'a/', limit: 3, after: page.next });
    }
    expect(seen).toEqual(under);
    // `after` before the prefix starts at the prefix; after its end, nothing.
    expect(
      (await store.pageDeadLetters({ prefix: 'a/', after: '0', limit: 2 })).items.map((d) => d.key),
    ).toEqual(under.slice(0, 2));
    expect((await store.pageDeadLetters({ prefix: 'a/', after: 'a0', limit: 2 })).items).toEqual([]);
    expect((await store.pageDeadLetters({ prefix: 'a/[' })).items.map((d) => d.key)).toEqual(['a/[x]']);
    expect((await store.pageDeadLetters({ prefix: 'a/*' })).items.map((d) => d.key)).toEqual(['a/*']);
  });

  it('refuse a dead letter of a newer form, and name a field or index entry that is not one', async () => {
    const { store, prefix } = await openStore();
    const k = fx.keys(prefix);
    await deadLetter(store, ['fine']);
    const fine = JSON.parse((await fx.admin.hget(k.dead, 'fine'))!) as Record<string, unknown>;
    await fx.admin.hset(k.dead, 'newer', JSON.stringify({ ...fine, v: 2 }));
    await fx.admin.zadd(k.deadIndex, 0, 'newer', 0, 'junk');
    await expect(store.loadDeadLetter('newer')).rejects.toThrow(/newer version/);
    await expect(store.loadDeadLetter('newer')).rejects.toBeInstanceOf(CorruptDataError);
    await fx.admin.hset(k.dead, 'junk', '{not json');
    await expect(store.loadDeadLetter('junk')).rejects.toThrow(
      /field "junk" does not hold a duetime dead letter/,
    );
    await fx.admin.zrem(k.deadIndex, 'newer', 'junk');
    await fx.admin.zadd(k.deadIndex, 0, 'orphan');
    await expect(store.pageDeadLetters()).rejects.toThrow(/"orphan"/);
    await fx.admin.set(k.deadIndex, 'not a zset');
    await expect(store.pageDeadLetters()).rejects.toThrow(k.deadIndex);
    // A commit that would write a dead letter checks the index's type before anything is written.
    await expect(deadLetter(store, ['blocked'])).rejects.toBeInstanceOf(CorruptDataError);
    expect(await fx.admin.get(k.deadIndex)).toBe('not a zset');
    expect(await fx.admin.hexists(k.dead, 'blocked')).toBe(0);
    expect((await store.loadSchedule('blocked'))?.attempts).toBe(0);
  });
});
