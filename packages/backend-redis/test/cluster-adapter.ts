import type { Backend } from '@duetime/core';
import { Cluster, type ClusterOptions } from 'ioredis';
import { createRedisBackend, KeySpace, type RedisBackendOptions } from '../src/index.js';

/** Every node of the Redis Cluster the tests use (`bash scripts/services.sh up --clusters`). */
export const clusterUrls = (
  process.env.DUETIME_REDIS_CLUSTER_URLS ??
  [7001, 7002, 7003, 7004, 7005, 7006].map((port) => `redis://127.0.0.1:${port}`).join(',')
)
  .split(',')
  .map((url) => url.trim())
  .filter((url) => url !== '');

/** The startup nodes of an ioredis `Cluster`, from the URLs. */
export function startupNodes(): { host: string; port: number }[] {
  return clusterUrls.map((url) => {
    const parsed = new URL(url);
    return { host: parsed.hostname, port: Number(parsed.port || 6379) };
  });
}

/**
 * The cluster options duetime's documentation recommends (README, "Redis Cluster"): commands wait through a
 * failover instead of failing at once, and the slot table is refreshed when a node goes away.
 */
export const clusterOptions: ClusterOptions = {
  redisOptions: { connectTimeout: 3000, maxRetriesPerRequest: 1 },
  enableOfflineQueue: true,
  retryDelayOnFailover: 200,
  retryDelayOnClusterDown: 200,
  retryDelayOnTryAgain: 200,
  slotsRefreshTimeout: 2000,
  clusterRetryStrategy: (times) => Math.min(2000, 100 * times),
};

let reachable: Promise<void> | undefined;

/** Fails fast, naming the cluster and how to start it, when it does not answer or is not healthy. */
export function assertClusterReachable(): Promise<void> {
  reachable ??= (async () => {
    const probe = new Cluster(startupNodes(), {
      redisOptions: { connectTimeout: 3000, maxRetriesPerRequest: 0 },
      clusterRetryStrategy: () => null,
      enableOfflineQueue: true,
    });
    probe.on('error', () => {});
    try {
      const info = String(await probe.cluster('INFO'));
      if (!/cluster_state:ok/.test(info))
        throw new Error(`cluster_state is not ok: ${info.split('\r\n')[0]}`);
    } catch (error) {
      throw new Error(
        `the Redis Cluster is not reachable at ${clusterUrls.join(',')} (${error instanceof Error ? error.message : String(error)}). ` +
          'Start it with `bash scripts/services.sh up --clusters`, or point DUETIME_REDIS_CLUSTER_URLS at its nodes.',
      );
    } finally {
      probe.disconnect();
    }
  })();
  return reachable;
}

/** A connected `Cluster` client with the recommended options. */
export function clusterClient(options: ClusterOptions = {}): Cluster {
  return new Cluster(startupNodes(), { ...clusterOptions, ...options });
}

const opened = new Set<string>();

/**
 * Opens a Redis backend on a cluster client of its own (passed as `{ client }`, the way an application
 * shares its `Cluster`); closing the backend also closes that client.
 */
export async function openOnCluster(prefix: string, options: RedisBackendOptions = {}): Promise<Backend> {
  await assertClusterReachable();
  opened.add(prefix);
  const client = clusterClient();
  client.on('error', () => {});
  let backend: Backend;
  try {
    backend = await createRedisBackend({ client }, { prefix, ...options });
  } catch (error) {
    client.disconnect();
    throw error;
  }
  const close = backend.close.bind(backend);
  return Object.assign(backend, {
    async close() {
      await close();
      client.disconnect();
    },
  });
}

/** The conformance suite's entry: a backend on the cluster, the namespace as the store's prefix. */
export function open(namespace: string): Promise<Backend> {
  return openOnCluster(namespace);
}

/** Deletes every key of one store on the cluster (SCAN on every master, then UNLINK). */
export async function dropClusterStore(cluster: Cluster, prefix: string): Promise<void> {
  const { pattern } = new KeySpace(prefix);
  for (const node of cluster.nodes('master')) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      // All of a store's keys share its hash tag, so one UNLINK of many keys is a single-slot command.
      if (keys.length > 0) await node.unlink(...keys);
    } while (cursor !== '0');
  }
}

/** Deletes every key of the stores this process opened on the cluster (call after all tests of a file). */
export async function dropOpenedClusterStores(): Promise<void> {
  if (opened.size === 0) return;
  const admin = clusterClient();
  admin.on('error', () => {});
  try {
    await admin.cluster('INFO');
    for (const prefix of opened) await dropClusterStore(admin, prefix);
    opened.clear();
  } finally {
    admin.disconnect();
  }
}

export interface NodeAddress {
  host: string;
  port: number;
}

/** The master serving `key`'s slot and its replicas (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`). */
export async function slotOwners(
  cluster: Cluster,
  key: string,
): Promise<{ slot: number; master: NodeAddress; replicas: NodeAddress[] }> {
  const slot = Number(await cluster.cluster('KEYSLOT', key));
  const ranges = await cluster.cluster('SLOTS');
  for (const [start, end, master, ...replicas] of ranges)
    if (master && slot >= start && slot <= end)
      return {
        slot,
        master: { host: master[0], port: Number(master[1]) },
        replicas: replicas.map(([host, port]) => ({ host, port: Number(port) })),
      };
  throw new Error(`no node serves slot ${slot} (key ${key})`);
}

/** The ioredis connection the cluster client keeps to one node. */
export function clusterNode(cluster: Cluster, address: NodeAddress) {
  const node = cluster
    .nodes('all')
    .find((n) => n.options.host === address.host && n.options.port === address.port);
  if (!node) throw new Error(`the cluster client has no connection to ${address.host}:${address.port}`);
  return node;
}
