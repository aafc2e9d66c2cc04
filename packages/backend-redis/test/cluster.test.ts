import { type Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeySpace, type RedisBackendOptions } from '../src/index.js';
import { luaScripts } from '../src/lua/scripts.generated.js';
import {
  assertClusterReachable,
  clusterClient,
  dropOpenedClusterStores,
  type NodeAddress,
  openOnCluster,
  slotOwners,
} from './cluster-adapter.js';
import { message, waitFor } from './helpers.js';

// What the conformance suite cannot see on a Redis Cluster (test/conformance-cluster.test.ts runs it there):
// scripts cached on every master, change notifications published on one node and heard on another, and
// replicated writes (`waitForReplicas`) on masters that have replicas.
const HOUR = 3_600_000;
let admin: Cluster;
const BUSY_SCRIPT = `#!lua flags=no-writes
local function ms() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
local start = ms()
local now = start
while now - start < tonumber(ARGV[1]) do now = ms() end
return {start, now}`;
const toClose: { close(): Promise<void> }[] = [];
let counter = 0;
const freshPrefix = () => `dtc${process.pid}x${Date.now().toString(36)}x${counter++}`;

beforeAll(async () => {
  await assertClusterReachable();
  admin = clusterClient();
  admin.on('error', () => {});
  await admin.cluster('INFO');
});
afterAll(async () => {
  await Promise.allSettled(toClose.splice(0).map((b) => b.close()));
  await dropOpenedClusterStores();
  admin?.disconnect();
});

async function open(prefix: string, options: RedisBackendOptions = {}) {
  const backend = await openOnCluster(prefix, options);
  toClose.push(backend);
  return backend;
}

/** A plain connection to one node (a replica answers reads after READONLY). */
async function nodeConnection(address: NodeAddress): Promise<Redis> {
  const node = new Redis({ host: address.host, port: address.port, maxRetriesPerRequest: 1 });
  node.on('error', () => {});
  toClose.push({ close: async () => node.disconnect() });
  return node;
}

describe('Redis Cluster', () => {
  it('loads its scripts into every master’s cache at startup', async () => {
    const masters = admin.nodes('master');
    expect(masters.length).toBeGreaterThanOrEqual(3);
    // Other tests on this cluster meanwhile fall back to sending a script whole once (NOSCRIPT), as designed.
    await Promise.all(masters.map((m) => m.script('FLUSH')));
    await open(freshPrefix());
    const shas = Object.values(luaScripts).map((s) => s.sha);
    for (const master of masters)
      expect(await master.script('EXISTS', ...shas), `${master.options.host}:${master.options.port}`).toEqual(
        shas.map(() => 1),
      );
  });

  it('tells a watcher whose change subscriber sits on another node than the store about remote commits', async () => {
    // The subscriber connects to a node of ioredis's choosing: try stores until it is not the store's master.
    for (let attempt = 0; ; attempt++) {
      const prefix = freshPrefix();
      const keys = new KeySpace(prefix);
      const watching = await open(prefix);
      const writing = await open(prefix);
      const heard: (number | undefined)[] = [];
      const stop = watching.store.onChange((change) => {
        if (change.remote && !change.channel) heard.push(change.earliest?.getTime());
      });
      try {
        const { master } = await slotOwners(admin, keys.schedules);
        const subscribedAt = await waitFor('the change subscriber', async () => {
          for (const node of admin.nodes('all')) {
            const [, count] = (await node.pubsub('NUMSUB', keys.channel)) as [string, number];
            if (Number(count) > 0) return node.options;
          }
          return undefined;
        });
        if (subscribedAt.host === master.host && subscribedAt.port === master.port) {
          expect(attempt, 'the subscriber always landed on the store’s master').toBeLessThan(20);
          continue;
        }
        const t = Date.now() + HOUR;
        await writing.store.transact(async (tx) => {
          await tx.schedule('n/2', new Date(t + 5), message('n'));
          await tx.schedule('n/1', new Date(t), message('n'));
        });
        await writing.store.transact((tx) => tx.schedule('n/3', new Date(t + 9), message('n')));
        await waitFor('two notifications published on another node', () => heard.length >= 2);
        expect(heard).toEqual([t, t + 9]);
        return;
      } finally {
        stop();
      }
    }
  });

  it('opens its change subscriber with the application’s cluster settings (here, its connection name)', async () => {
    const prefix = freshPrefix();
    const keys = new KeySpace(prefix);
    const name = `app-${prefix}`;
    const client = clusterClient({ redisOptions: { connectionName: name, connectTimeout: 3000 } });
    client.on('error', () => {});
    toClose.push({ close: async () => client.disconnect() });
    const { createRedisBackend } = await import('../src/index.js');
    const backend = await createRedisBackend({ client }, { prefix });
    toClose.push(backend);
    const stop = backend.store.onChange(() => {});
    try {
      const subscriberName = await waitFor('the change subscriber', async () => {
        for (const node of admin.nodes('all')) {
          const [, count] = (await node.pubsub('NUMSUB', keys.channel)) as [string, number];
          if (Number(count) === 0) continue;
          const line = String(await node.client('LIST'))
            .split('\n')
            .find((l) => /\bsub=1\b/.test(l));
          return /\bname=(\S*)/.exec(line ?? '')?.[1] ?? '(none)';
        }
        return undefined;
      });
      expect(subscriberName).toContain(name);
    } finally {
      stop();
    }
  });

  describe('waitForReplicas', () => {
    it('returns from a commit, a lease and a cursor only once the replica holds them, even while it is busy', async () => {
      const prefix = freshPrefix();
      const keys = new KeySpace(prefix);
      const backend = await open(prefix, { waitForReplicas: { replicas: 1, timeoutMs: 10_000 } });
      const { replicas } = await slotOwners(admin, keys.schedules);
      expect(replicas.length).toBeGreaterThanOrEqual(1);
      const replica = await nodeConnection(replicas[0]!);
      await replica.readonly();
      const busy = await nodeConnection(replicas[0]!);
      // Keeps the replica busy for `ms` (a read-only script spinning on its clock) and says when, by the
      // server's clock: the cluster runs on this machine, so it is the clock Date.now() reads too.
      /** [start, end] of the busy spell, in ms. */
      const occupy = (ms: number) =>
        busy.eval(BUSY_SCRIPT, 0, ms).then((reply) => (reply as number[]).map(Number) as [number, number]);
      const writes: [string, () => Promise<unknown>, () => Promise<boolean>][] = [
        [
          'commit',
          () =>
            backend.store.transact((tx) =>
              tx.schedule('replicated', new Date(Date.now() + HOUR), message('r')),
            ),
          async () => (await replica.hexists(keys.schedules, 'replicated')) === 1,
        ],
        [
          'lease',
          () => backend.leases.acquire('lease', 'me', 60_000),
          async () => (await replica.get(keys.lease('lease')))?.endsWith(' me') === true,
        ],
        [
          'cursor',
          () => backend.cursors.advance('cursor', new Date(1_000_000), 60_000),
          async () => (await replica.get(keys.cursor('cursor'))) === '1000000',
        ],
      ];
      for (const [what, write, replicated] of writes) {
        for (let attempt = 1; ; attempt++) {
          const spinning = occupy(400);
          await new Promise((resolve) => setTimeout(resolve, 100));
          const sentAt = Date.now();
          await write();
          const returnedAt = Date.now();
          const [startedAt, endedAt] = await spinning;
          // Sent before the replica was busy: it may have applied the write at once; try again.
          if (sentAt < startedAt) {
            expect(attempt, `${what}: the replica never got busy before the write`).toBeLessThan(10);
            continue;
          }
          expect(returnedAt, `${what} returned while the replica was busy`).toBeGreaterThanOrEqual(endedAt);
          expect(await replicated(), `${what} on the replica`).toBe(true);
          break;
        }
      }
    });

    it('fails a write more replicas must confirm than the shard has, transiently, after retrying within the window', async () => {
      const prefix = freshPrefix();
      const backend = await open(prefix, {
        waitForReplicas: { replicas: 2, timeoutMs: 100 },
        commitTimeoutMs: 500,
      });
      const error = await backend.store
        .transact((tx) => tx.schedule('two/replicas', new Date(Date.now() + HOUR), message('t')))
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'DUETIME_BACKEND', transient: true });
      expect(String(error)).toMatch(/gave up after \d+ attempts/);
      expect(String(error)).toMatch(/confirmed by 1 of 2 replicas within 100 ms/);
      // Applied once on the primary (the retries were recognised as the same commit).
      expect((await backend.store.loadSchedule('two/replicas'))?.version).toBe(1);
    });
  });
});
