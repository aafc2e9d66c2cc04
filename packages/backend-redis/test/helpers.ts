import { randomBytes } from 'node:crypto';
import { type Backend, type Message, systemClock } from '@duetime/core';
import { Redis } from 'ioredis';
import { afterAll, afterEach } from 'vitest';
import { createRedisBackend, KeySpace, type RedisBackendOptions } from '../src/index.js';
import { ScriptRunner } from '../src/scripts.js';
import { RedisStore } from '../src/store.js';
import { assertRedisReachable, dropStore, redisUrl } from './adapter.js';

export { redisUrl };

/**
 * Per test file: an admin connection for inspecting and disturbing the server, fresh stores that are
 * closed after each test and whose keys are deleted after the file.
 */
export function redisFixture() {
  const admin = new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  admin.on('error', () => {});
  const prefixes: string[] = [];
  const toClose: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    await Promise.allSettled(toClose.splice(0).map((b) => b.close()));
  });
  afterAll(async () => {
    for (const prefix of prefixes) await dropStore(admin, prefix);
    admin.disconnect();
  });
  return {
    admin,
    /** A new, empty store prefix, deleted after the file. */
    prefix(): string {
      const prefix = `dt${randomBytes(6).toString('hex')}`;
      prefixes.push(prefix);
      return prefix;
    },
    /** Opens a backend from the test URL (closed after the test). */
    async open(prefix: string, options: RedisBackendOptions = {}): Promise<Backend<undefined>> {
      await assertRedisReachable();
      const backend = await createRedisBackend({ url: redisUrl }, { prefix, ...options });
      toClose.push(backend);
      return backend;
    },
    /** Closes `thing` after the test. */
    closeLater<T extends { close(): Promise<void> }>(thing: T): T {
      toClose.push(thing);
      return thing;
    },
    keys: (prefix: string) => new KeySpace(prefix),
  };
}

/** A message about the aggregate `aggregateId` (so it can also make an event: `{ ...message(id), sequence, timestamp }`). */
export function message(aggregateId: string, data?: unknown): Message & { aggregateId: string } {
  return data === undefined ? { type: 'test.fired', aggregateId } : { type: 'test.fired', aggregateId, data };
}

/** The ids of duetime's connections for `prefix` (by connection name), from CLIENT LIST. */
export async function duetimeClientIds(admin: Redis, prefix: string): Promise<string[]> {
  const list = String(await admin.client('LIST'));
  const names = new Set([`duetime:${prefix}`, `duetime-watch:${prefix}`]);
  return list
    .split('\n')
    .map((line) => ({ id: /\bid=(\d+)/.exec(line)?.[1], name: /\bname=(\S*)/.exec(line)?.[1] }))
    .filter((c) => c.id !== undefined && c.name !== undefined && names.has(c.name))
    .map((c) => c.id!);
}

/** Polls `check` until it returns a truthy value, or fails after `timeoutMs` naming `what`. */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  timeoutMs = 20_000,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * The store adapter of a backend on `prefix`, built from its parts (tests of the adapter itself: claims,
 * settlements, what one script call applies). Closed after the test.
 */
export async function openAdapter(
  fx: ReturnType<typeof redisFixture>,
  prefix: string,
  options: {
    claimTtl?: number | undefined;
    commitTimeoutMs?: number;
    senderId?: string;
    client?: Redis;
  } = {},
) {
  await assertRedisReachable();
  const client = options.client ?? fx.closeLater(disconnecting(new Redis(redisUrl)));
  const keys = new KeySpace(prefix);
  const runner = new ScriptRunner(client);
  await runner.load();
  const logger = { debug() {}, info() {}, warn() {}, error() {} };
  const senderId = options.senderId ?? randomBytes(6).toString('hex');
  const watch = { client, channel: keys.channel, senderId, logger };
  const claimTtl = 'claimTtl' in options ? options.claimTtl : 5000;
  const store = new RedisStore({
    ...{ runner, keys, senderId, claimTtl, watch, logger, clock: systemClock },
    ...{ commitTimeoutMs: options.commitTimeoutMs ?? 0, markerTtl: 60_000 },
  });
  fx.closeLater({ close: async () => store.stopWatching() });
  return store;
}

function disconnecting(client: Redis): Redis & { close(): Promise<void> } {
  return Object.assign(client, { close: async () => void client.disconnect() });
}
