import type { Backend } from '@duetime/core';
import { Redis } from 'ioredis';
import { createRedisBackend, KeySpace } from '../src/index.js';

/** The Redis the tests use: DUETIME_REDIS_URL, or the local default. */
export const redisUrl = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';

const opened = new Set<string>();
let reachable: Promise<void> | undefined;

/** Fails fast, naming the service and how to start it, when Redis does not answer. */
export function assertRedisReachable(): Promise<void> {
  reachable ??= (async () => {
    const probe = new Redis(redisUrl, {
      lazyConnect: true,
      connectTimeout: 3000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
    } catch (error) {
      throw new Error(
        `Redis is not reachable at ${redisUrl} (${error instanceof Error ? error.message : String(error)}). ` +
          'Start it with `bash scripts/services.sh up`, or point DUETIME_REDIS_URL at a Redis 7 server.',
      );
    } finally {
      probe.disconnect();
    }
  })();
  return reachable;
}

/** Opens a Redis backend on the store prefix `namespace` (a fresh namespace is a fresh, empty store). */
export async function open(namespace: string): Promise<Backend> {
  await assertRedisReachable();
  opened.add(namespace);
  return createRedisBackend({ url: redisUrl }, { prefix: namespace });
}

/** Deletes every key of the stores this process opened (call after all tests of a file). */
export async function dropOpenedStores(): Promise<void> {
  if (opened.size === 0) return;
  const admin = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    for (const namespace of opened) await dropStore(admin, namespace);
    opened.clear();
  } finally {
    admin.disconnect();
  }
}

/** Deletes every key of one store (SCAN, then UNLINK). */
export async function dropStore(admin: Redis, prefix: string): Promise<void> {
  const { pattern } = new KeySpace(prefix);
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await admin.unlink(...keys);
  } while (cursor !== '0');
}
