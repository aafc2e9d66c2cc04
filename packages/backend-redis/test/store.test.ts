import type { Schedule, Settlement, Store, StoreChange, Write } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import type { RedisStore } from '../src/store.js';
import { message, openAdapter, redisFixture, waitFor } from './helpers.js';

const HOUR = 3_600_000;
const fx = redisFixture();

async function allPages(store: Store<undefined>, query: { limit: number; prefix?: string; through?: Date }) {
  const seen: Schedule[] = [];
  let page = await store.pageSchedules(query);
  for (;;) {
    seen.push(...page.items);
    if (!page.next) return seen;
    page = await store.pageSchedules({ ...query, after: page.next });
  }
}

/** UTF-8 byte order, the order Redis keeps sorted-set members in. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

describe('due index', () => {
  it('moves the due score whenever an active key is rescheduled, earlier or later', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    const far = Date.now() + 10 * HOUR;
    const past = Date.now() - 1000;
    await store.transact((tx) => tx.schedule('move/me', new Date(far), message('m')));
    expect(Number(await fx.admin.zscore(k.due, 'move/me'))).toBe(far);
    expect(await due(adapter)).toEqual([]);

    await store.transact((tx) => tx.schedule('move/me', new Date(past), message('m')));
    expect(Number(await fx.admin.zscore(k.due, 'move/me'))).toBe(past);
    expect(Number(await fx.admin.zscore(k.at, 'move/me'))).toBe(past);
    expect((await due(adapter)).map((s) => s.key)).toEqual(['move/me']);
    expect((await store.nextDueAt())?.getTime()).toBe(past);

    await store.transact((tx) => tx.schedule('move/me', new Date(far + 1), message('m')));
    expect(Number(await fx.admin.zscore(k.due, 'move/me'))).toBe(far + 1);
    expect(await due(adapter)).toEqual([]);
    expect(await fx.admin.zcard(k.due)).toBe(1);
  });

  it('moves dueAt on a recorded failure, and a reschedule resets attempts and dueAt to the new deadline', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    const at = Date.now() - 5000;
    await store.transact((tx) => tx.schedule('retry/me', new Date(at), message('r')));
    const { version } = (await store.loadSchedule('retry/me'))!;
    const later = Date.now() + HOUR;
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    const [claimed] = unit.claimed!;
    expect(claimed).toMatchObject({ key: 'retry/me', version });
    const failure = { attempts: 3, dueAt: new Date(later), error: 'Error: x' };
    expect(await adapter.commit(unit, { writes: [], settlements: [retry(claimed!, failure)] })).toEqual(
      new Map(),
    );
    expect(await store.loadSchedule('retry/me')).toMatchObject({
      attempts: 3,
      version,
      message: message('r'),
    });
    expect(Number(await fx.admin.zscore(k.due, 'retry/me'))).toBe(later);
    expect(Number(await fx.admin.zscore(k.at, 'retry/me'))).toBe(at);
    expect((await store.loadSchedule('retry/me'))?.lastError).toBe('Error: x');
    expect(await due(adapter)).toEqual([]);

    const again = Date.now() - 10;
    await store.transact((tx) => tx.schedule('retry/me', new Date(again), message('r', { n: 2 })));
    const reset = (await store.loadSchedule('retry/me'))!;
    expect(reset).toMatchObject({ attempts: 0, message: message('r', { n: 2 }) });
    // A new version has no failed attempt yet.
    expect(reset.lastError).toBeUndefined();
    expect(reset.dueAt.getTime()).toBe(again);
    expect(Number(await fx.admin.zscore(k.due, 'retry/me'))).toBe(again);
    expect((await due(adapter)).map((s) => s.key)).toEqual(['retry/me']);
    const next = await adapter.begin({ now: new Date(), limit: 10 });
    const settlements = next.claimed!.map((schedule) => ({
      schedule,
      outcome: 'consume' as const,
      writes: [],
    }));
    expect(await adapter.commit(next, { writes: [], settlements })).toEqual(new Map());
    expect(await fx.admin.hexists(k.schedules, 'retry/me')).toBe(0);
  });

  it('records a failure only on the version that failed', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    await store.transact((tx) => tx.schedule('stale/me', new Date(Date.now() - 5000), message('s')));
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    const [claimed] = unit.claimed!;
    await store.transact((tx) => tx.schedule('stale/me', new Date(Date.now() - 1), message('s', { n: 2 })));
    const failure = { attempts: 1, dueAt: new Date(Date.now() + HOUR), error: 'late' };
    expect(await adapter.commit(unit, { writes: [], settlements: [retry(claimed!, failure)] })).toEqual(
      new Map(),
    );
    const now = (await store.loadSchedule('stale/me'))!;
    expect(now).toMatchObject({ attempts: 0, message: message('s', { n: 2 }) });
    expect(now.version).toBeGreaterThan(claimed!.version);
    expect((await due(adapter)).map((s) => s.key)).toEqual(['stale/me']);
  });

  it('orders due work by (dueAt, key bytes) and claims it by limit', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const t = Date.now() - 1000;
    const keys = ['b', 'a', 'ä', '🙂', 'a/1', 'Z'];
    await store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, new Date(t), message(key));
      await tx.schedule('earlier', new Date(t - 1), message('e'));
      await tx.schedule('later', new Date(Date.now() + HOUR), message('l'));
    });
    const listed = await due(adapter);
    expect(listed.map((s) => s.key)).toEqual(['earlier', ...[...keys].sort(byBytes)]);
    const unit = await adapter.begin({ now: new Date(), limit: 3 });
    expect(unit.claimed?.map((s) => s.key)).toEqual(listed.slice(0, 3).map((s) => s.key));
    await adapter.rollback(unit);
  });
});

describe('listing', () => {
  it('pages thousands of schedules sharing one deadline by key, without gaps or repeats', async () => {
    const { store } = await fx.open(fx.prefix());
    const at = new Date(Date.now() + HOUR);
    const keys = Array.from({ length: 2500 }, (_, i) => `same/${(i * 7919) % 2500}`);
    await store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, at, message('s'));
      await tx.schedule('before', new Date(at.getTime() - 1), message('b'));
      await tx.schedule('after', new Date(at.getTime() + 1), message('a'));
    });
    const expected = ['before', ...[...keys].sort(byBytes), 'after'];
    expect((await allPages(store, { limit: 97 })).map((s) => s.key)).toEqual(expected);
    expect((await allPages(store, { limit: 1000 })).map((s) => s.key)).toEqual(expected);
    const through = await allPages(store, { limit: 333, through: at });
    expect(through.map((s) => s.key)).toEqual(expected.slice(0, -1));
  });

  it('continues after a cursor whose key was deleted or moved meanwhile', async () => {
    const { store } = await fx.open(fx.prefix());
    const at = new Date(Date.now() + HOUR);
    await store.transact(async (tx) => {
      for (let i = 0; i < 300; i++) await tx.schedule(`gone/${String(i).padStart(3, '0')}`, at, message('g'));
    });
    const first = await store.pageSchedules({ limit: 100 });
    expect(first.next?.key).toBe('gone/099');
    await store.transact(async (tx) => {
      await tx.cancelSchedule('gone/099');
      await tx.schedule('gone/100', new Date(at.getTime() + HOUR), message('moved'));
    });
    const second = await store.pageSchedules({ limit: 5, after: first.next! });
    expect(second.items.map((s) => s.key)).toEqual([
      'gone/101',
      'gone/102',
      'gone/103',
      'gone/104',
      'gone/105',
    ]);
    // A cursor at a key that never existed, between two existing ones.
    const between = await store.pageSchedules({ limit: 2, after: { at: at.getTime(), key: 'gone/150x' } });
    expect(between.items.map((s) => s.key)).toEqual(['gone/151', 'gone/152']);
  });

  it('lists a large prefix by walking the deadline order, and a small one from the key index, in the same order', async () => {
    const { store } = await fx.open(fx.prefix());
    const base = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (let i = 0; i < 2600; i++) await tx.schedule(`big/${i}`, new Date(base + (i % 13)), message('b'));
      for (let i = 0; i < 40; i++) await tx.schedule(`small/${i}`, new Date(base + (i % 3)), message('s'));
      for (let i = 0; i < 40; i++) await tx.schedule(`bigger/${i}`, new Date(base + (i % 5)), message('x'));
    });
    const order = (a: Schedule, b: Schedule) => a.at.getTime() - b.at.getTime() || byBytes(a.key, b.key);
    const all = await allPages(store, { limit: 10_000 });
    for (const prefix of ['big/', 'small/', 'big', 'bigger/']) {
      const paged = await allPages(store, { prefix, limit: 150 });
      const expected = all.filter((s) => s.key.startsWith(prefix)).sort(order);
      expect(paged.map((s) => s.key)).toEqual(expected.map((s) => s.key));
    }
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('big/'))).toBe(2600);
    expect((await store.listSchedules()).map((s) => s.key).sort()).toHaveLength(80);
  });
});

describe('literal prefixes in UTF-8', () => {
  it('cancels and lists by multibyte prefixes, byte for byte', async () => {
    const { store } = await fx.open(fx.prefix());
    const at = new Date(Date.now() + HOUR);
    const keys = [
      'ключ/1',
      'ключ/2',
      'ключи',
      'клю',
      'ü',
      'ü/1',
      'ü\u00ff',
      'ÿ',
      'ÿ/1',
      '\uffff',
      '\uffff/1',
      '\ufffd',
      '🙂',
      '🙂/a',
      '🙃/a',
      '𐀀',
      'a*',
      'a[b]',
      'a?',
      'a\\',
    ];
    await store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, at, message('x'));
    });
    const listed = async (prefix: string) =>
      (await store.pageSchedules({ prefix, limit: 100 })).items.map((s) => s.key).sort();
    const under = (prefix: string, among: string[]) => among.filter((k) => k.startsWith(prefix)).sort();
    for (const prefix of [
      'ключ',
      'ключ/',
      'ü',
      'ÿ',
      '\uffff',
      '🙂',
      '\ud83d\ude42/',
      'a[',
      'a*',
      'a\\',
      '𐀀',
    ]) {
      expect(await listed(prefix), `prefix ${prefix}`).toEqual(under(prefix, keys));
    }
    let remaining = [...keys];
    for (const prefix of ['ключ/', 'ÿ', '\uffff', '🙂', 'a[', 'a*']) {
      expect(await store.transact((tx) => tx.cancelSchedulePrefix(prefix)), `cancel ${prefix}`).toBe(
        under(prefix, remaining).length,
      );
      remaining = remaining.filter((k) => !k.startsWith(prefix));
      expect((await store.listSchedules()).map((s) => s.key).sort()).toEqual([...remaining].sort());
    }
    expect(remaining).toContain('ключи');
    expect(remaining).toContain('ü\u00ff');
    expect(remaining).toContain('🙃/a');
  });
});

describe('commits', () => {
  it('applies nothing when a later operation conflicts (no partial writes from the script)', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    await store.transact((tx) => tx.schedule('c/1', new Date(Date.now() - 1), message('c')));
    const event = (timestamp: number) => ({ ...message('agg'), sequence: 1, timestamp });
    const append = (timestamp: number): Write => ({
      op: 'append',
      aggregateId: 'agg',
      expectedSequence: 0,
      events: [event(timestamp)],
    });
    // Someone else appends to the aggregate first.
    await adapter.commit(await adapter.begin(), { writes: [append(2)], settlements: [] });
    const counterBefore = await fx.admin.get(k.version);
    const commit = adapter.commit(await adapter.begin(), {
      writes: [
        { op: 'put', key: 'c/new', at: new Date(), message: message('n') },
        { op: 'delete', key: 'c/1' },
        append(1),
      ],
      settlements: [],
    });
    await expect(commit).rejects.toMatchObject({
      code: 'DUETIME_CONFLICT',
      kind: 'aggregate',
      subject: 'agg',
    });
    expect(await store.loadSchedule('c/new')).toBeUndefined();
    expect(await store.loadSchedule('c/1')).toBeDefined();
    expect((await store.loadEvents('agg')).map((e) => e.timestamp)).toEqual([2]);
    expect(await fx.admin.get(k.version)).toBe(counterBefore);
    // A put on a version that moved on is a version conflict, and applies nothing either.
    const { version } = (await store.loadSchedule('c/1'))!;
    const stale = adapter.commit(await adapter.begin(), {
      writes: [
        { op: 'put', key: 'c/other', at: new Date(), message: message('o') },
        { op: 'put', key: 'c/1', at: new Date(), message: message('c2'), ifVersion: version + 1 },
      ],
      settlements: [],
    });
    await expect(stale).rejects.toMatchObject({ code: 'DUETIME_CONFLICT', kind: 'version', subject: 'c/1' });
    expect(await store.loadSchedule('c/other')).toBeUndefined();
  });

  it('puts a key twice in one transaction of puts only: the later one is stored, with the later version', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const t = Date.now() + HOUR;
    await store.transact(async (tx) => {
      await tx.schedule('twice', new Date(t + 5), message('first'));
      await tx.schedule('other', new Date(t), message('o'));
      await tx.schedule('twice', new Date(t + 1), message('second'));
    });
    expect(await store.loadSchedule('twice')).toMatchObject({ version: 3, message: message('second') });
    expect(Number(await fx.admin.zscore(k.due, 'twice'))).toBe(t + 1);
    expect(Number(await fx.admin.zscore(k.at, 'twice'))).toBe(t + 1);
    expect(await fx.admin.zcard(k.index)).toBe(2);
    expect(await fx.admin.get(k.version)).toBe('3');
    // The same with a cancellation in between takes the general way, with the same outcome.
    await store.transact(async (tx) => {
      await tx.schedule('twice', new Date(t + 7), message('third'));
      await tx.cancelSchedule('other');
      await tx.schedule('twice', new Date(t + 2), message('fourth'));
    });
    expect(await store.loadSchedule('twice')).toMatchObject({ version: 5, message: message('fourth') });
    expect(Number(await fx.admin.zscore(k.at, 'twice'))).toBe(t + 2);
    expect(await store.loadSchedule('other')).toBeUndefined();
  });

  it('applies a commit once when the same commit is sent twice (a reply lost to a dropped connection)', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const { ScriptRunner } = await import('../src/scripts.js');
    const { encodeCommit, encodeWrites } = await import('../src/commit.js');
    const runner = new ScriptRunner(fx.admin);
    const writes: Write[] = [
      { op: 'put', key: 'once', at: new Date(), message: message('o') },
      {
        op: 'append',
        aggregateId: 'agg',
        expectedSequence: 0,
        events: [{ ...message('agg'), sequence: 1, timestamp: 1 }],
      },
    ];
    const { keys, args } = encodeCommit(
      { keys: k, markerTtl: 60_000, senderId: 'test' },
      'same-commit',
      { token: '', claimed: [] },
      (list) => [encodeWrites(writes, list)],
    );
    expect(await runner.run('commit', keys, args)).toEqual(['ok']);
    expect(await runner.run('commit', keys, args)).toEqual(['duplicate']);
    expect((await store.loadSchedule('once'))?.version).toBe(1);
    expect(await store.loadEvents('agg')).toHaveLength(1);
    expect(await fx.admin.pttl(k.marker('same-commit'))).toBeGreaterThan(0);
  });
});

describe('large transactions', () => {
  it('commits 50,000 schedules in one transaction and cancels them by prefix in another', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const at = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (let i = 0; i < 50_000; i++) await tx.schedule(`bulk/${i}`, new Date(at + i), message('b'));
    });
    expect((await store.loadSchedule('bulk/49999'))?.version).toBe(50_000);
    expect((await store.pageSchedules({ limit: 3 })).items.map((s) => s.key)).toEqual([
      'bulk/0',
      'bulk/1',
      'bulk/2',
    ]);
    const page = await store.pageSchedules({ limit: 10_000, prefix: 'bulk/' });
    expect(page.items).toHaveLength(10_000);
    const adapter = await openAdapter(fx, prefix);
    const through = new Date(at + 20_000);
    expect(await adapter.listSchedules({ order: 'due', through, limit: 10_000 })).toHaveLength(10_000);
    // One claim takes them all, a few hundred per read inside the script.
    const unit = await adapter.begin({ now: through, limit: 10_000 });
    expect(unit.claimed).toHaveLength(10_000);
    await adapter.rollback(unit);
    expect(await fx.admin.hlen(fx.keys(prefix).claims)).toBe(0);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('bulk/'))).toBe(50_000);
    expect(await store.listSchedules()).toEqual([]);
  }, 60_000);
});

describe('change notifications', () => {
  it('tells watchers of other instances about commits with the earliest deadline, not of their own', async () => {
    const prefix = fx.prefix();
    const first = await openAdapter(fx, prefix);
    const second = await fx.open(prefix);
    const heardByFirst: (number | undefined)[] = [];
    const events: string[] = [];
    const stop = first.watch((event) => {
      events.push(event.type);
      if (event.type === 'change') heardByFirst.push(event.earliest?.getTime());
    });
    try {
      await waitFor('the subscriber to be live', () => events.includes('live'));
      expect(await subscribers(prefix)).toBe(1);
      const t = Date.now() + HOUR;
      await second.store.transact(async (tx) => {
        await tx.schedule('n/2', new Date(t + 5), message('n'));
        await tx.schedule('n/1', new Date(t), message('n'));
      });
      const own: Write = { op: 'put', key: 'n/own', at: new Date(t - 5), message: message('n') };
      await first.commit(await first.begin(), { writes: [own], settlements: [] });
      await second.store.transact((tx) => tx.cancelSchedule('n/1'));
      await second.store.transact((tx) => tx.schedule('n/3', new Date(t + 9), message('n')));
      await waitFor('two notifications', () => heardByFirst.length >= 2);
      expect(heardByFirst).toEqual([t, t + 9]);
    } finally {
      stop();
    }
    await waitFor('the subscriber to be gone', async () => (await subscribers(prefix)) === 0);
  });
});

describe('change subscriber', () => {
  it('reports the channel lost when its connection is killed, and live again once resubscribed', async () => {
    const prefix = fx.prefix();
    const first = await fx.open(prefix);
    const second = await fx.open(prefix);
    const heard: StoreChange[] = [];
    const stop = first.store.onChange((change) => heard.push(change));
    const channel = () => heard.flatMap((c) => (c.channel ? [c.channel] : []));
    try {
      await waitFor('the subscriber', () => channel().includes('live'));
      const list = String(await fx.admin.client('LIST'));
      const id = list.split('\n').find((line) => line.includes(`name=duetime-watch:${prefix} `));
      await fx.admin.client('KILL', 'ID', /\bid=(\d+)/.exec(id ?? '')![1]!);
      await waitFor('the channel to be lost and live again', () => channel().join() === 'live,lost,live');
      expect(await subscribers(prefix)).toBe(1);
      const t = Date.now() + HOUR;
      await second.store.transact((tx) => tx.schedule('after/kill', new Date(t), message('k')));
      await waitFor('the remote commit to be heard again', () =>
        heard.some((c) => c.remote && c.earliest?.getTime() === t),
      );
    } finally {
      stop();
    }
  });
});

/** How many connections subscribe to the change channel of `prefix`. */
async function subscribers(prefix: string): Promise<number> {
  const numsub = (await fx.admin.pubsub('NUMSUB', fx.keys(prefix).channel)) as [string, number];
  return Number(numsub[1]);
}

/** What is due now, in claim order (read without claiming). */
function due(adapter: RedisStore) {
  return adapter.listSchedules({ order: 'due', through: new Date(), limit: 100 });
}

/** A failed attempt of `schedule`. */
function retry(schedule: Schedule, failure: Settlement['failure']): Settlement {
  return { schedule, outcome: 'retry', failure, writes: [] };
}
