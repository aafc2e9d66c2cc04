import { createRedisBackend, KeySpace, type RedisBackendOptions } from '@duetime/backend-redis';
import type { Backend } from '@duetime/core';
import { Cluster, type ClusterOptions } from 'ioredis';

/**
 * The ioredis `Cluster` settings the Redis backend's README recommends: node connections time out, commands
 * wait through a failover (queued while the slot table is refreshed, retried on CLUSTERDOWN and TRYAGAIN)
 * instead of failing at once, and the slot table is refreshed often enough to notice a promotion.
 */
export const CLUSTER_OPTIONS: ClusterOptions = {
  redisOptions: { connectTimeout: 3000, maxRetriesPerRequest: 1 },
  enableOfflineQueue: true,
  retryDelayOnFailover: 200,
  retryDelayOnClusterDown: 200,
  retryDelayOnTryAgain: 200,
  slotsRefreshTimeout: 2000,
  slotsRefreshInterval: 2000,
  clusterRetryStrategy: (times) => Math.min(2000, 100 * times),
};

function startupNodes(urls: string[]): { host: string; port: number }[] {
  return urls.map((url) => {
    const parsed = new URL(url);
    return { host: parsed.hostname, port: Number(parsed.port || 6379) };
  });
}

/** A Redis backend on a cluster client of its own; closing the backend closes the client too. */
export async function openRedisCluster(urls: string[], options: RedisBackendOptions): Promise<Backend> {
  const client = new Cluster(startupNodes(urls), CLUSTER_OPTIONS);
  client.on('error', () => {});
  let backend: Backend;
  try {
    backend = await createRedisBackend({ client }, options);
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

/** Deletes every key of the store `prefix` on the cluster (SCAN on every master, then UNLINK). */
export async function dropRedisClusterStore(urls: string[], prefix: string): Promise<void> {
  const admin = new Cluster(startupNodes(urls), CLUSTER_OPTIONS);
  admin.on('error', () => {});
  try {
    await admin.cluster('INFO');
    const { pattern } = new KeySpace(prefix);
    for (const node of admin.nodes('master')) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) await node.unlink(...keys);
      } while (cursor !== '0');
    }
  } finally {
    admin.disconnect();
  }
}
