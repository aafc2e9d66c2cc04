import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { watchChild } from '@duetime/conformance';
import {
  aggregate,
  type Backend,
  type Clock,
  ConflictError,
  CorruptDataError,
  Dispatcher,
  systemClock,
} from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { luaScripts } from '../src/lua/scripts.generated.js';
import { message, redisFixture, redisUrl, waitFor } from './helpers.js';
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
async function proxiedBackend(prefix: string, options: { claims?: { ttl: number } } = {}) {
  const proxy = await ReplyDroppingProxy.start(new URL(redisUrl));
  proxies.push(proxy);
  const url = new URL(redisUrl);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const { createRedisBackend } = await import('../src/index.js');
  const backend = fx.closeLater(await createRedisBackend({ url: url.href }, { prefix, ...options }));
  return { backend, proxy };
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
      processor: async (tx, m, { schedule }) => {
        await tx.exec(effects, `effect/${schedule.key}`, (_s, ag) => ag.raise('effect.applied'));
        if (m.aggregateId === 'b/3') throw new Error('boom');
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    try {
      await waitFor('the batch to commit', () => dispatcher.snapshot().batches === 1);
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
    const app = await fx.open(prefix);
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['r/replaced', 'r/moved', 'r/fine']);
    const tx = await backend.store.driver.deliver(new Date(), 10);
    expect(tx.claimed.map((s) => s.key)).toEqual(['r/replaced', 'r/moved', 'r/fine']);
    const [replaced, moved] = tx.claimed;
    tx.savepoint('r/replaced');
    await tx.appendEvents('agg/replaced', 0, [event('agg/replaced', 1)]);
    await tx.releaseSavepoint();
    tx.savepoint('r/moved');
    await tx.appendEvents('agg/moved', 0, [event('agg/moved', 1)]);
    await tx.releaseSavepoint();
    tx.savepoint('r/fine');
    await tx.putSchedule('r/side', new Date(Date.now() + HOUR), message('side'));
    await tx.releaseSavepoint();
    // Meanwhile the application replaces one schedule and appends to the other's aggregate.
    await app.store.transact((t) => t.schedule('r/replaced', new Date(Date.now() - 1), message('new')));
    await app.store.transact((t) => t.exec(effects, 'agg/moved', (_s, ag) => ag.raise('effect.applied')));

    const rejected = await tx.commit();
    expect([...rejected.keys()].sort()).toEqual(['r/moved', 'r/replaced']);
    expect(rejected.get('r/replaced')).toMatchObject({ kind: 'schedule', subject: 'r/replaced' });
    expect(rejected.get('r/moved')).toMatchObject({ kind: 'aggregate', subject: 'agg/moved' });
    expect(rejected.get('r/moved')).toBeInstanceOf(ConflictError);
    // The applied group: consumed, with its write.
    expect(await backend.store.loadSchedule('r/fine')).toBeUndefined();
    expect((await backend.store.loadSchedule('r/side'))?.message).toEqual(message('side'));
    // The replaced key holds the application's version, untouched; the moved one is pending as it was.
    const now = await backend.store.loadSchedule('r/replaced');
    expect(now?.version).toBeGreaterThan(replaced!.version);
    expect(now?.message).toEqual(message('new'));
    expect(await backend.store.loadEvents('agg/replaced')).toEqual([]);
    expect(await backend.store.loadSchedule('r/moved')).toEqual(moved);
    expect((await backend.store.loadEvents('agg/moved')).map((e) => e.timestamp)).not.toContain(1);
    // Both are due again at once (their claims ended with the commit), each at its own due time.
    expect(await fx.admin.hlen(k.claims)).toBe(0);
    expect((await backend.store.driver.dueSchedules(new Date(), 10)).map((s) => s.key)).toEqual([
      'r/moved',
      'r/replaced',
    ]);
  });

  it('checks each group against what the earlier groups of the same commit applied', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    await scheduleDue(backend, ['s/1', 's/2', 's/3', 's/4']);
    const tx = await backend.store.driver.deliver(new Date(), 10);
    tx.savepoint('s/1');
    await tx.appendEvents('shared', 0, [event('shared', 1)]);
    tx.savepoint('s/2');
    // Written as if the first group had not applied: it has, so this one is left out.
    await tx.appendEvents('shared', 0, [event('shared', 1)]);
    tx.savepoint('s/3');
    await tx.appendEvents('shared', 1, [event('shared', 2)]);
    // The fourth cancels the first schedule's key, already consumed by the first group: still no conflict.
    tx.savepoint('s/4');
    expect(await tx.deleteSchedule('s/1')).toBe(false);
    const rejected = await tx.commit();
    expect([...rejected]).toEqual([['s/2', new ConflictError('aggregate', 'shared')]]);
    expect((await backend.store.loadEvents('shared')).map((e) => e.sequence)).toEqual([1, 2]);
    expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['s/2']);
  });

  it('never writes part of a group: a group left out writes nothing, and bad data stops the whole commit before any write', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['p/1', 'p/2']);
    const before = await backend.store.listSchedules();
    const counter = await fx.admin.get(k.version);

    const first = await backend.store.driver.deliver(new Date(), 10);
    first.savepoint('p/1');
    await first.putSchedule('p/put-before', new Date(Date.now() + HOUR), message('x'));
    await first.appendEvents('p/agg', 0, [event('p/agg', 1)]);
    await first.putSchedule('p/put-after', new Date(Date.now() + HOUR), message('y'));
    await backend.store.transact((t) => t.exec(effects, 'p/agg', (_s, ag) => ag.raise('effect.applied')));
    const rejected = await first.commit();
    expect([...rejected.keys()]).toEqual(['p/1']);
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
    const second = await backend.store.driver.deliver(new Date(), 10);
    expect(second.claimed.map((s) => s.key)).toEqual(['p/1', 'p/3']);
    second.savepoint('p/1');
    await second.putSchedule('p/written?', new Date(Date.now() + HOUR), message('w'));
    second.savepoint('p/3');
    await second.appendEvents('p/broken', 0, [event('p/broken', 1)]);
    await expect(second.commit()).rejects.toBeInstanceOf(CorruptDataError);
    expect(await backend.store.listSchedules()).toEqual(pending);
    expect(await fx.admin.get(k.version)).toBe(counterNow);
    expect(await fx.admin.get(k.events('p/broken'))).toBe('not a list');
    // The failed commit ended the claims: both are due again.
    expect(await fx.admin.hlen(k.claims)).toBe(0);
    expect((await backend.store.driver.dueSchedules(new Date(), 10)).map((s) => s.key)).toEqual([
      'p/1',
      'p/3',
    ]);
  });

  it('answers a resent commit as the first run did, groups left out included (a reply lost to a dropped connection)', async () => {
    const prefix = fx.prefix();
    const { backend, proxy } = await proxiedBackend(prefix);
    const app = await fx.open(prefix);
    await scheduleDue(backend, ['l/1', 'l/2']);
    const tx = await backend.store.driver.deliver(new Date(), 10);
    tx.savepoint('l/1');
    await tx.appendEvents('l/agg', 0, [event('l/agg', 1)]);
    await app.store.transact((t) => t.schedule('l/2', new Date(Date.now() - 1), message('replaced')));
    const commits = proxy.count(luaScripts.commit.sha);
    proxy.dropReplyTo(luaScripts.commit.sha);
    const rejected = await tx.commit();
    expect(proxy.dropped).toBe(1);
    expect(commits()).toBe(2);
    expect([...rejected]).toEqual([['l/2', new ConflictError('schedule', 'l/2')]]);
    expect(await backend.store.loadEvents('l/agg')).toHaveLength(1);
    expect((await backend.store.listSchedules()).map((s) => s.message.aggregateId)).toEqual(['replaced']);
  });
});

describe('claims', () => {
  it('never hands a schedule an open delivery holds to another delivery; with claims off, it does', async () => {
    const prefix = fx.prefix();
    const first = await fx.open(prefix);
    const second = await fx.open(prefix);
    expect(first.capabilities.exclusiveClaims).toBe(true);
    await scheduleDue(first, ['c/1', 'c/2', 'c/3']);
    const a = await first.store.driver.deliver(new Date(), 2);
    expect(a.claimed.map((s) => s.key)).toEqual(['c/1', 'c/2']);
    const b = await second.store.driver.deliver(new Date(), 10);
    expect(b.claimed.map((s) => s.key)).toEqual(['c/3']);
    expect(await second.store.driver.dueSchedules(new Date(), 10)).toEqual([]);
    const c = await second.store.driver.deliver(new Date(), 10);
    expect(c.claimed).toEqual([]);
    await c.rollback();
    await a.rollback();
    // Released: due again, in order, and claimable.
    expect((await second.store.driver.dueSchedules(new Date(), 10)).map((s) => s.key)).toEqual([
      'c/1',
      'c/2',
    ]);
    expect(await b.commit()).toEqual(new Map());

    const open = fx.prefix();
    const one = await fx.open(open, { claims: false });
    const other = await fx.open(open, { claims: false });
    expect(one.capabilities.exclusiveClaims).toBe(false);
    await scheduleDue(one, ['o/1']);
    const x = await one.store.driver.deliver(new Date(), 10);
    const y = await other.store.driver.deliver(new Date(), 10);
    expect(x.claimed.map((s) => s.key)).toEqual(['o/1']);
    expect(y.claimed.map((s) => s.key)).toEqual(['o/1']);
    // One instance never hands it to two of its own deliveries, though.
    const z = await one.store.driver.deliver(new Date(), 10);
    expect(z.claimed).toEqual([]);
    await z.rollback();
    expect(await x.commit()).toEqual(new Map());
    expect([...(await y.commit()).keys()]).toEqual(['o/1']);
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

  it('renews the claims of a delivery that stays open past their time to live', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix, { claims: { ttl: 300 } });
    const k = fx.keys(prefix);
    await scheduleDue(backend, ['n/1']);
    const opened = Date.now();
    const tx = await backend.store.driver.deliver(new Date(opened), 10);
    const claimedUntil = Number(await fx.admin.zscore(k.due, 'n/1'));
    expect(claimedUntil).toBe(opened + 300);
    await waitFor(
      'a renewal to move the claim on',
      async () => Number(await fx.admin.zscore(k.due, 'n/1')) >= claimedUntil + 300,
    );
    const other = await fx.open(prefix);
    const rival = await other.store.driver.deliver(new Date(claimedUntil + 1), 10);
    expect(rival.claimed).toEqual([]);
    await rival.rollback();
    expect(await tx.commit()).toEqual(new Map());
    expect(await backend.store.loadSchedule('n/1')).toBeUndefined();
  });

  it('never lets a renewal hide a version put while the delivery is open, nor a commit end another delivery’s claim', async () => {
    const prefix = fx.prefix();
    const holder = await fx.open(prefix, { claims: { ttl: 300 } });
    const app = await fx.open(prefix);
    const k = fx.keys(prefix);
    await scheduleDue(holder, ['v/1']);
    const old = await holder.store.driver.deliver(new Date(), 10);
    expect(old.claimed.map((s) => s.version)).toHaveLength(1);
    await app.store.transact((t) => t.schedule('v/1', new Date(Date.now() - 1), message('v2')));
    // The next renewal finds another version: it gives the claim up instead of hiding that version.
    await waitFor(
      'the renewal to give up the replaced claim',
      async () => (await fx.admin.hexists(k.claims, 'v/1')) === 0,
    );
    const fresh = await app.store.driver.deliver(new Date(), 10);
    expect(fresh.claimed.map((s) => s.message)).toEqual([message('v2')]);
    expect([...(await old.commit()).keys()]).toEqual(['v/1']);
    // The old delivery's commit left the new claim alone.
    expect(await app.store.driver.dueSchedules(new Date(), 10)).toEqual([]);
    expect(await fx.admin.hlen(k.claims)).toBe(1);
    expect(await fresh.commit()).toEqual(new Map());
    expect(await app.store.loadSchedule('v/1')).toBeUndefined();
  });

  it('lets the claims of a SIGKILLed process expire; its schedules are then delivered', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    await scheduleDue(backend, ['k/1', 'k/2']);
    const child = spawnClaimer(prefix, 60_000);
    try {
      expect(await child.line(/^claimed /)).toBe('claimed k/1,k/2');
    } finally {
      await child.kill();
    }
    // Within the dead process's claim time to live, nobody gets them.
    const early = await backend.store.driver.deliver(new Date(), 10);
    expect(early.claimed).toEqual([]);
    await early.rollback();
    // Past it (a clock 61 s ahead stands for the wait), a dispatcher delivers both.
    const ahead: Clock = { now: () => Date.now() + 61_000, setTimer: systemClock.setTimer };
    const dispatcher = new Dispatcher({
      store: backend.store,
      clock: ahead,
      processor: async (tx, _m, { schedule }) => {
        await tx.exec(effects, `k-effect/${schedule.key}`, (_s, ag) => ag.raise('effect.applied'));
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    try {
      await waitFor('both to be delivered', async () => (await backend.store.listSchedules()).length === 0);
    } finally {
      controller.abort();
      await done;
    }
    expect(await backend.store.loadEvents('k-effect/k/1')).toHaveLength(1);
    expect(await backend.store.loadEvents('k-effect/k/2')).toHaveLength(1);
  }, 60_000);
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

/** Runs test/fixtures/claim-and-hang.ts: it claims what is due and holds the claims until killed. */
function spawnClaimer(prefix: string, ttl: number) {
  const require = createRequire(import.meta.url);
  const conformance = createRequire(require.resolve('@duetime/conformance/package.json'));
  const loader = pathToFileURL(conformance.resolve('tsx')).href;
  const script = fileURLToPath(new URL('./fixtures/claim-and-hang.ts', import.meta.url));
  const child = spawn(
    process.execPath,
    ['--import', loader, '--conditions=source', script, redisUrl, prefix, String(ttl)],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return watchChild(child, { label: 'claim-and-hang' });
}
