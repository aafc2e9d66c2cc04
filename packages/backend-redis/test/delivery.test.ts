import {
  aggregate,
  type Backend,
  type Claimed,
  ConflictError,
  CorruptDataError,
  Dispatcher,
  type Schedule,
  type Settlement,
  type Write,
} from '@duetime/core';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { luaScripts } from '../src/lua/scripts.generated.js';
import type { RedisStore } from '../src/store.js';
import { message, openAdapter, redisFixture, redisUrl, waitFor } from './helpers.js';
import { ReplyDroppingProxy } from './proxy.js';

const HOUR = 3_600_000;
const fx = redisFixture();
const proxies: ReplyDroppingProxy[] = [];
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

const effects = aggregate({
  type: 'delivery-effects',
  initial: 0,
  apply: { 'effect.applied': (n: number) => n + 1 },
});

const event = (aggregateId: string, sequence: number) => ({
  ...message(aggregateId),
  sequence,
  timestamp: sequence,
});

/** A backend whose connection runs through a proxy that counts script calls and can lose replies. */
async function proxiedBackend(prefix: string) {
  const proxy = await ReplyDroppingProxy.start(new URL(redisUrl));
  proxies.push(proxy);
  const url = new URL(redisUrl);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const { createRedisBackend } = await import('../src/index.js');
  const backend = fx.closeLater(await createRedisBackend({ url: url.href }, { prefix }));
  const client = new Redis(url.href, { lazyConnect: true });
  fx.closeLater({ close: async () => void client.disconnect() });
  return { backend, proxy, client };
}

/** Schedules `keys` due in the past, in key order. */
async function scheduleDue(backend: Backend<undefined>, keys: string[]): Promise<void> {
  const at = Date.now() - 60_000;
  await backend.store.transact(async (tx) => {
    for (const [i, key] of keys.entries()) await tx.schedule(key, new Date(at + i), message(key));
  });
}

describe('a delivery batch', () => {
  it('commits the others when one processor throws, and records exactly that failure, in one commit script call', async () => {
    const prefix = fx.prefix();
    const { backend, proxy } = await proxiedBackend(prefix);
    const k = fx.keys(prefix);
    const { store } = backend;
    const keys = ['b/1', 'b/2', 'b/3', 'b/4', 'b/5'];
    await scheduleDue(backend, keys);
    const versions = new Map((await store.listSchedules()).map((s) => [s.key, s.version]));
    const commits = proxy.count(luaScripts.commit.sha);
    const claims = proxy.count(luaScripts.deliver.sha);
    const started = Date.now();
    const dispatcher = new Dispatcher({
      store,
      retryDelay: HOUR,
      // One batch however loaded the machine: a budget it cannot reach sends nothing back unrun.
      batchDuration: 600_000,
      processor: async (tx, m, { schedule }) => {
        await tx.exec(effects, `effect/${schedule.key}`, (_s, ag) => ag.raise('effect.applied'));
        if (m.aggregateId === 'b/3') throw new Error('boom');
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    try {
      await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    } finally {
      controller.abort();
      await done;
    }
    expect(dispatcher.snapshot()).toMatchObject({ batches: 1, delivered: 4, failed: 1 });
    expect(commits()).toBe(1);
    expect(claims()).toBeGreaterThanOrEqual(1);
    expect((await store.listSchedules()).map((s) => s.key)).toEqual(['b/3']);
    for (const key of keys)
      expect((await store.loadEvents(`effect/${key}`)).length, key).toBe(key === 'b/3' ? 0 : 1);
    const failed = (await store.loadSchedule('b/3'))!;
    expect(failed).toMatchObject({ version: versions.get('b/3'), attempts: 1, lastError: 'Error: boom' });
    expect(failed.dueAt.getTime()).toBeGreaterThanOrEqual(started + HOUR);
    expect(Number(await fx.admin.zscore(k.due, 'b/3'))).toBe(failed.dueAt.getTime());
    // The error is kept in the schedule's own value, before the message.
    expect(await fx.admin.hget(k.schedules, 'b/3')).toMatch(/ 1 e11 Error: boom \{/);
    expect(await fx.admin.hlen(k.claims)).toBe(0);
  });

  it('leaves out a group whose schedule was replaced or whose aggregate moved on while it was open; the other groups apply', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['r/replaced', 'r/moved', 'r/fine']);
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    expect(unit.claimed?.map((s) => s.key)).toEqual(['r/replaced', 'r/moved', 'r/fine']);
    const [replaced, moved, fine] = unit.claimed!;
    // Meanwhile the application replaces one schedule and appends to the other's aggregate.
    await backend.store.transact((t) => t.schedule('r/replaced', new Date(Date.now() - 1), message('new')));
    await backend.store.transact((t) => t.exec(effects, 'agg/moved', (_s, ag) => ag.raise('effect.applied')));

    const rejected = await adapter.commit(unit, {
      writes: [],
      settlements: [
        consume(replaced!, [append('agg/replaced', 0)]),
        consume(moved!, [append('agg/moved', 0)]),
        consume(fine!, [
          { op: 'put', key: 'r/side', at: new Date(Date.now() + HOUR), message: message('side') },
        ]),
      ],
    });
    expect([...rejected!.keys()].sort()).toEqual(['r/moved', 'r/replaced']);
    expect(rejected!.get('r/replaced')).toMatchObject({ kind: 'schedule', subject: 'r/replaced' });
    expect(rejected!.get('r/moved')).toMatchObject({ kind: 'aggregate', subject: 'agg/moved' });
    expect(rejected!.get('r/moved')).toBeInstanceOf(ConflictError);
    // The applied group: consumed, with its write.
    expect(await backend.store.loadSchedule('r/fine')).toBeUndefined();
    expect((await backend.store.loadSchedule('r/side'))?.message).toEqual(message('side'));
    // The replaced key holds the application's version, untouched; the moved one is pending as it was.
    const now = await backend.store.loadSchedule('r/replaced');
    expect(now?.version).toBeGreaterThan(replaced!.version);
    expect(now?.message).toEqual(message('new'));
    expect(await backend.store.loadEvents('agg/replaced')).toEqual([]);
    expect(await backend.store.loadSchedule('r/moved')).toEqual(withoutFlags(moved!));
    // Both are due again at once (their claims ended with the commit), each at its own due time.
    expect(await fx.admin.hlen(k.claims)).toBe(0);
    expect((await due(adapter)).map((s) => s.key)).toEqual(['r/moved', 'r/replaced']);
  });

  it('checks each group against what the earlier groups of the same commit applied', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    await scheduleDue(backend, ['s/1', 's/2', 's/3', 's/4']);
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    const [s1, s2, s3, s4] = unit.claimed!;
    const rejected = await adapter.commit(unit, {
      writes: [],
      settlements: [
        consume(s1!, [append('shared', 0)]),
        // Written as if the first group had not applied: it has, so this one is left out.
        consume(s2!, [append('shared', 0)]),
        consume(s3!, [append('shared', 1)]),
        // The fourth cancels the first schedule's key, already consumed by the first group: no conflict.
        consume(s4!, [{ op: 'delete', key: 's/1' }]),
      ],
    });
    expect([...rejected!]).toEqual([['s/2', new ConflictError('aggregate', 'shared')]]);
    expect((await backend.store.loadEvents('shared')).map((e) => e.sequence)).toEqual([1, 2]);
    expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['s/2']);
  });

  it('never writes part of a group: a group left out writes nothing, and bad data stops the whole commit before any write', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const adapter = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['p/1', 'p/2']);
    const before = await backend.store.listSchedules();
    const counter = await fx.admin.get(k.version);
    const later = new Date(Date.now() + HOUR);

    const first = await adapter.begin({ now: new Date(), limit: 10 });
    await backend.store.transact((t) => t.exec(effects, 'p/agg', (_s, ag) => ag.raise('effect.applied')));
    const rejected = await adapter.commit(first, {
      writes: [],
      settlements: [
        consume(first.claimed![0]!, [
          { op: 'put', key: 'p/put-before', at: later, message: message('x') },
          append('p/agg', 0),
          { op: 'put', key: 'p/put-after', at: later, message: message('y') },
        ]),
        consume(first.claimed![1]!),
      ],
    });
    expect([...rejected!.keys()]).toEqual(['p/1']);
    expect(await backend.store.loadSchedule('p/put-before')).toBeUndefined();
    expect(await backend.store.loadSchedule('p/put-after')).toBeUndefined();
    expect(await backend.store.loadSchedule('p/1')).toEqual(before[0]);
    expect(await backend.store.loadSchedule('p/2')).toBeUndefined();
    expect(await fx.admin.get(k.version)).toBe(counter);

    // An event list of the wrong type, named by the second group: the first group is not written either.
    await scheduleDue(backend, ['p/3']);
    const pending = await backend.store.listSchedules();
    const counterNow = await fx.admin.get(k.version);
    await fx.admin.set(k.events('p/broken'), 'not a list');
    const second = await adapter.begin({ now: new Date(), limit: 10 });
    expect(second.claimed?.map((s) => s.key)).toEqual(['p/1', 'p/3']);
    const commit = adapter.commit(second, {
      writes: [],
      settlements: [
        consume(second.claimed![0]!, [{ op: 'put', key: 'p/written?', at: later, message: message('w') }]),
        consume(second.claimed![1]!, [append('p/broken', 0)]),
      ],
    });
    await expect(commit).rejects.toBeInstanceOf(CorruptDataError);
    expect(await backend.store.listSchedules()).toEqual(pending);
    expect(await fx.admin.get(k.version)).toBe(counterNow);
    expect(await fx.admin.get(k.events('p/broken'))).toBe('not a list');
    // The failed commit ended the claims: both are due again.
    expect(await fx.admin.hlen(k.claims)).toBe(0);
    expect((await due(adapter)).map((s) => s.key)).toEqual(['p/1', 'p/3']);
  });

  it('answers a resent commit as the first run did, groups left out included (a reply lost to a dropped connection)', async () => {
    const prefix = fx.prefix();
    const { backend, proxy, client } = await proxiedBackend(prefix);
    const adapter = await openAdapter(fx, prefix, { client, commitTimeoutMs: 10_000 });
    await scheduleDue(backend, ['l/1', 'l/2']);
    const unit = await adapter.begin({ now: new Date(), limit: 10 });
    await backend.store.transact((t) => t.schedule('l/2', new Date(Date.now() - 1), message('replaced')));
    const commits = proxy.count(luaScripts.commit.sha);
    proxy.dropReplyTo(luaScripts.commit.sha);
    const rejected = await adapter.commit(unit, {
      writes: [],
      settlements: [consume(unit.claimed![0]!, [append('l/agg', 0)]), consume(unit.claimed![1]!)],
    });
    expect(proxy.dropped).toBe(1);
    expect(commits()).toBe(2);
    expect([...rejected!]).toEqual([['l/2', new ConflictError('schedule', 'l/2')]]);
    expect(await backend.store.loadEvents('l/agg')).toHaveLength(1);
    expect((await backend.store.listSchedules()).map((s) => s.message.aggregateId)).toEqual(['replaced']);
  });
});

describe('claims', () => {
  it('never hands a schedule an open unit holds to another unit; with claims off, it does', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    expect(backend.capabilities.exclusiveClaims).toBe(true);
    const first = await openAdapter(fx, prefix);
    const second = await openAdapter(fx, prefix);
    await scheduleDue(backend, ['c/1', 'c/2', 'c/3']);
    const a = await first.begin({ now: new Date(), limit: 2 });
    expect(a.claimed?.map((s) => s.key)).toEqual(['c/1', 'c/2']);
    const b = await second.begin({ now: new Date(), limit: 10 });
    expect(b.claimed?.map((s) => s.key)).toEqual(['c/3']);
    const c = await second.begin({ now: new Date(), limit: 10 });
    expect(c.claimed).toEqual([]);
    await second.rollback(c);
    await first.rollback(a);
    // Released: claimable again, in order, and not counted as interrupted.
    const d = await second.begin({ now: new Date(), limit: 10 });
    expect(d.claimed?.map((s) => [s.key, s.interrupted])).toEqual([
      ['c/1', undefined],
      ['c/2', undefined],
    ]);
    await second.rollback(d);
    expect(await second.commit(b, { writes: [], settlements: [consume(b.claimed![0]!)] })).toEqual(new Map());

    const open = fx.prefix();
    const loose = await fx.open(open, { claims: false });
    expect(loose.capabilities.exclusiveClaims).toBe(false);
    const one = await openAdapter(fx, open, { claimTtl: undefined });
    const other = await openAdapter(fx, open, { claimTtl: undefined });
    await scheduleDue(loose, ['o/1']);
    const x = await one.begin({ now: new Date(), limit: 10 });
    const y = await other.begin({ now: new Date(), limit: 10 });
    expect(x.claimed?.map((s) => s.key)).toEqual(['o/1']);
    expect(y.claimed?.map((s) => s.key)).toEqual(['o/1']);
    expect(await one.commit(x, { writes: [], settlements: [consume(x.claimed![0]!)] })).toEqual(new Map());
    const lost = await other.commit(y, { writes: [], settlements: [consume(y.claimed![0]!)] });
    expect([...lost!.keys()]).toEqual(['o/1']);
  });

  it('keeps two dispatchers from ever running one schedule at the same time', async () => {
    const prefix = fx.prefix();
    const backends = [await fx.open(prefix), await fx.open(prefix)];
    const count = 400;
    await backends[0]!.store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(`x/${i}`, new Date(Date.now() - count + i), message(`x${i}`));
    });
    const running = new Set<string>();
    const runs = new Map<string, number>();
    let overlaps = 0;
    const controller = new AbortController();
    const dispatchers = backends.map(
      (backend) =>
        new Dispatcher({
          store: backend.store,
          concurrency: 4,
          batchSize: 20,
          processor: async (tx, _m, { schedule }) => {
            if (running.has(schedule.key)) overlaps++;
            running.add(schedule.key);
            runs.set(schedule.key, (runs.get(schedule.key) ?? 0) + 1);
            // Yield to the event loop, so the batches of both dispatchers interleave.
            await new Promise((resolve) => setImmediate(resolve));
            await tx.exec(effects, `x-effect/${schedule.key}`, (_s, ag) => ag.raise('effect.applied'));
            running.delete(schedule.key);
          },
        }),
    );
    const done = dispatchers.map((d) => d.run(controller.signal));
    try {
      await waitFor(
        'every schedule to be consumed',
        async () => (await backends[0]!.store.listSchedules()).length === 0,
        60_000,
      );
    } finally {
      controller.abort();
      await Promise.all(done);
    }
    expect(overlaps).toBe(0);
    expect(runs.size).toBe(count);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect(dispatchers.every((d) => d.snapshot().delivered > 0)).toBe(true);
    expect(dispatchers.reduce((n, d) => n + d.snapshot().delivered, 0)).toBe(count);
  }, 90_000);

  it('renews the claims of a unit that stays open past their time to live; a lapsed one comes back interrupted', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const holder = await openAdapter(fx, prefix, { claimTtl: 300 });
    const rival = await openAdapter(fx, prefix, { claimTtl: 300 });
    expect(holder.renewEveryMs).toBe(100);
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['n/1', 'n/2']);
    const unit = await holder.begin({ now: new Date(), limit: 1 });
    const claim = async () => String(await fx.admin.hget(k.claims, 'n/1')).split(' ');
    const [, version, until] = await claim();
    expect(Number(version)).toBe(unit.claimed![0]!.version);
    await waitFor('the claim to lapse unrenewed', async () => {
      const [seconds, micros] = (await fx.admin.time()).map(Number);
      return seconds! * 1000 + micros! / 1000 > Number(until);
    });
    await holder.renew!(unit);
    expect(Number((await claim())[2])).toBeGreaterThan(Number(until));
    const none = await rival.begin({ now: new Date(), limit: 1 });
    expect(none.claimed?.map((s) => s.key)).toEqual(['n/2']);
    await rival.rollback(none);
    // Unrenewed, the claim lapses: the version is claimed again and reported interrupted.
    let taken: Awaited<ReturnType<typeof rival.begin>> | undefined;
    await waitFor('the claim to lapse', async () => {
      taken = await rival.begin({ now: new Date(), limit: 2 });
      if (taken.claimed?.some((s) => s.key === 'n/1')) return true;
      await rival.rollback(taken);
      return false;
    });
    expect(taken!.claimed).toMatchObject([{ key: 'n/1', interrupted: true }, { key: 'n/2' }]);
    expect(taken!.claimed![1]!.interrupted).toBeUndefined();
    // The first unit no longer holds it: its consumption is refused, the new holder's applies.
    const refused = await holder.commit(unit, { writes: [], settlements: [consume(unit.claimed![0]!)] });
    expect(refused?.get('n/1')).toMatchObject({ kind: 'schedule' });
    expect(await fx.admin.hget(k.claims, 'n/1')).not.toBeNull();
    expect(await rival.commit(taken!, { writes: [], settlements: [consume(taken!.claimed![0]!)] })).toEqual(
      new Map(),
    );
    expect(await backend.store.loadSchedule('n/1')).toBeUndefined();
  });

  it('never lets a claim hide a version put while the unit is open, nor a commit end another unit’s claim', async () => {
    const prefix = fx.prefix();
    const app = await fx.open(prefix);
    const holder = await openAdapter(fx, prefix);
    const k = fx.keys(prefix);
    await scheduleDue(app, ['v/1']);
    const old = await holder.begin({ now: new Date(), limit: 10 });
    expect(old.claimed).toHaveLength(1);
    await app.store.transact((t) => t.schedule('v/1', new Date(Date.now() - 1), message('v2')));
    // The claim names the old version: the new one is claimable at once.
    const fresh = await holder.begin({ now: new Date(), limit: 10 });
    expect(fresh.claimed?.map((s) => [s.message, s.interrupted])).toEqual([[message('v2'), undefined]]);
    await holder.renew!(old);
    expect(String(await fx.admin.hget(k.claims, 'v/1'))).toContain(` ${fresh.claimed![0]!.version} `);
    const rejected = await holder.commit(old, { writes: [], settlements: [consume(old.claimed![0]!)] });
    expect([...rejected!.keys()]).toEqual(['v/1']);
    // The old unit's commit left the new claim alone.
    expect(await fx.admin.hlen(k.claims)).toBe(1);
    const settled = await holder.commit(fresh, { writes: [], settlements: [consume(fresh.claimed![0]!)] });
    expect(settled).toEqual(new Map());
    expect(await app.store.loadSchedule('v/1')).toBeUndefined();
    expect(await fx.admin.hlen(k.claims)).toBe(0);
  });
});

describe('enqueue', () => {
  it('sends one script call per awaited one-schedule transaction, and nothing else', async () => {
    const prefix = fx.prefix();
    const { backend, proxy } = await proxiedBackend(prefix);
    const commits = proxy.count(luaScripts.commit.sha);
    const requests = proxy.count('*');
    for (let i = 0; i < 20; i++)
      await backend.store.transact((tx) =>
        tx.schedule(`e/${i}`, new Date(Date.now() + HOUR), message(`e${i}`)),
      );
    expect(commits()).toBe(20);
    expect(requests()).toBe(20);
    expect(await backend.store.listSchedules()).toHaveLength(20);
  });
});

/** A consumption of `schedule` with `writes`. */
function consume(schedule: Schedule, writes: Write[] = []): Settlement {
  return { schedule, outcome: 'consume', writes };
}

/** Appends one event to `aggregateId`, expecting the stream at `expected`. */
function append(aggregateId: string, expected: number): Write {
  return {
    op: 'append',
    aggregateId,
    expectedSequence: expected,
    events: [event(aggregateId, expected + 1)],
  };
}

/** What is due now, in claim order (read without claiming). */
function due(adapter: RedisStore) {
  return adapter.listSchedules({ order: 'due', through: new Date(), limit: 100 });
}

/** A claimed schedule as a read returns it. */
function withoutFlags({ interrupted: _, ...schedule }: Claimed): Schedule {
  return schedule;
}
