import { randomBytes } from 'node:crypto';
import {
  type Backend,
  type Clock,
  defineBackend,
  durationOption,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  NotFoundError,
  type OptionReader,
  positiveInteger,
} from '@duetime/core';
import type { RedisOptions } from 'ioredis';
import { checkServer, openClient } from './connection.js';
import { KeySpace, storePrefix } from './keys.js';
import { RedisCursors, RedisLeases } from './leases.js';
import { type RedisClient, type ReplicaWait, ScriptRunner } from './scripts.js';
import { RedisStore, type RedisUnit } from './store.js';

/** Where the backend connects: a URL (it creates and closes its own client) or the application's client. */
export type RedisConnection = { url: string; client?: undefined } | { client: RedisClient; url?: undefined };

/** The options of {@link createRedisBackend}; the package README describes each. */
export interface RedisBackendOptions {
  /** Names the store: every key is `{prefix}:...` (default `duetime`), one Redis Cluster hash slot. */
  prefix?: string;
  /** Stamps events and drives dispatchers. Leases, cursors and claims are judged by the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** For clients created from a URL: how long to wait for the TCP connection, in ms (default 5,000). */
  connectTimeoutMs?: number;
  /** How long the first commands (version check, script loading) may take, in ms (default 10,000). */
  startupTimeoutMs?: number;
  /**
   * Delivery claims (default on, 5,000 ms time to live on the server's clock, renewed every third of it).
   * `false` turns them off: two dispatchers may then run one processor and exactly one commits.
   */
  claims?: boolean | { ttlMs?: number /** @deprecated Renamed to `ttlMs`. */; ttl?: number };
  /** Longest wait for one command, in ms (default 30,000). */
  requestTimeoutMs?: number;
  /** How long a commit keeps retrying through a lost connection or a restarting server, in ms (default 15,000). */
  commitTimeoutMs?: number;
  /** `false`: refuse a prefix nothing was ever written under (`NotFoundError`). Default true. */
  migrate?: boolean;
  /** Extra ioredis options for clients created from a URL (TLS, timeouts). Ignored with `{ client }`. */
  redisOptions?: RedisOptions;
  /** `WAIT` for this many replicas after each durable write (commit, lease, cursor); see the README. */
  waitForReplicas?: number | { replicas: number; timeoutMs?: number };
  /** @deprecated Renamed to {@link connectTimeoutMs}. */
  connectTimeout?: number;
  /** @deprecated Renamed to {@link startupTimeoutMs}. */
  startupTimeout?: number;
  /** @deprecated Renamed to {@link requestTimeoutMs}. */
  commandTimeout?: number;
  /** @deprecated Renamed to {@link commitTimeoutMs}. */
  commitRetryWindow?: number;
}

/** Options renamed to one spelling across backends: the old names work, with a warning, until the next minor. */
export const RENAMED_OPTIONS = {
  connectTimeout: 'connectTimeoutMs',
  startupTimeout: 'startupTimeoutMs',
  commandTimeout: 'requestTimeoutMs',
  commitRetryWindow: 'commitTimeoutMs',
} as const;

function readOptions(read: OptionReader) {
  const prefix = storePrefix(read.value('prefix') ?? 'duetime');
  const redisOptions = read.value<RedisOptions>('redisOptions');
  if (redisOptions?.keyPrefix)
    throw new InvalidArgumentError(
      'options.redisOptions.keyPrefix',
      redisOptions.keyPrefix,
      'is not supported; name the store with options.prefix',
    );
  return {
    prefix,
    startupTimeoutMs: read.duration('startupTimeoutMs', 10_000),
    commitTimeoutMs: read.duration('commitTimeoutMs', 15_000, {
      allowZero: true,
      max: Number.POSITIVE_INFINITY,
    }),
    requestTimeoutMs: read.duration('requestTimeoutMs', 30_000),
    migrate: read.boolean('migrate', true),
    redisOptions,
    ...claimSetting(read.value('claims')),
    replicaWait: replicaWaitSetting(read.value('waitForReplicas')),
  };
}

type Resolved = ReturnType<typeof readOptions>;

const factory = defineBackend<RedisConnection, RedisBackendOptions, Resolved, undefined, RedisUnit>({
  name: 'redis',
  factory: 'createRedisBackend',
  renamed: RENAMED_OPTIONS,
  connectTimeoutMs: 5000,
  options: readOptions,
  async open(connection, ctx) {
    const { options, logger } = ctx;
    const { prefix, replicaWait, claimTtl, commitTimeoutMs } = options;
    if (options.claimsTtlRenamed)
      logger.warn(
        'createRedisBackend: options.claims.ttl is deprecated and will be removed in the next minor version; use options.claims.ttlMs',
        { option: 'claims.ttl', replacement: 'claims.ttlMs' },
      );
    const { client, target, owned } = await openClient(connection, ctx, options);
    const keys = new KeySpace(prefix);
    const runner = new ScriptRunner(
      client,
      target,
      owned ? undefined : options.requestTimeoutMs,
      replicaWait,
    );
    const checks = { timeoutMs: options.startupTimeoutMs, logger, replicas: replicaWait?.replicas };
    await checkServer(client, target, checks, async () => {
      await runner.load();
      if (!options.migrate && (await runner.call((c) => c.exists(keys.version, keys.leaseToken))) === 0)
        throw new NotFoundError(
          `redis store ${prefix}`,
          `no duetime store with the prefix ${JSON.stringify(prefix)} on redis ${target}`,
        );
    });
    const senderId = randomBytes(8).toString('base64url');
    const watchName = owned ? { connectionName: `duetime-watch:${prefix}` } : {};
    const watch = { client, channel: keys.channel, senderId, logger, ...watchName };
    const base = { runner, keys, logger, senderId };
    const markerTtl = Math.max(60_000, 4 * Math.min(commitTimeoutMs, MAX_TIMER_MS));
    const store = new RedisStore({ ...base, claimTtl, watch, clock: ctx.clock, commitTimeoutMs, markerTtl });
    ctx.onClose(() => store.stopWatching());
    return {
      store,
      leases: new RedisLeases(base),
      cursors: new RedisCursors(base),
      capabilities: {
        multiProcess: true,
        durable: true,
        sql: false,
        exclusiveClaims: claimTtl !== undefined,
      },
      describe: `redis backend (prefix ${prefix})`,
    };
  },
});

/**
 * Opens a duetime backend on Redis 7 or later: the transactional store, leases and cursors. With `{ url }`
 * the backend creates its connection and `close()` closes it; with `{ client }` it uses the application's
 * ioredis `Redis` or `Cluster` and never closes it.
 *
 * @example
 * const backend = await createRedisBackend({ url: 'redis://127.0.0.1:6379' }, { prefix: 'billing' });
 * @throws {InvalidArgumentError} for a bad URL or option, naming it.
 * @throws {BackendError} when the server cannot be reached, refuses the login, or does not answer in time.
 * @throws {NotSupportedError} for a server older than Redis 7.
 */
export function createRedisBackend(
  connection: RedisConnection,
  options: RedisBackendOptions = {},
): Promise<Backend<undefined>> {
  return factory(connection, options);
}

function claimSetting(claims: unknown): { claimTtl: number | undefined; claimsTtlRenamed: boolean } {
  if (claims === false) return { claimTtl: undefined, claimsTtlRenamed: false };
  if (
    claims !== undefined &&
    claims !== true &&
    (typeof claims !== 'object' || !claims || Array.isArray(claims))
  )
    throw new InvalidArgumentError('options.claims', claims, 'must be a boolean or { ttlMs }');
  const { ttlMs, ttl } = (typeof claims === 'object' ? claims : {}) as { ttlMs?: unknown; ttl?: unknown };
  if (ttl !== undefined && ttlMs !== undefined)
    throw new InvalidArgumentError(
      'options.claims.ttl',
      ttl,
      'is the old name of options.claims.ttlMs; give only ttlMs',
    );
  const field = ttl !== undefined ? 'options.claims.ttl' : 'options.claims.ttlMs';
  return { claimTtl: durationOption(field, ttl ?? ttlMs, 5000), claimsTtlRenamed: ttl !== undefined };
}

function replicaWaitSetting(setting: unknown): ReplicaWait | undefined {
  if (setting === undefined) return undefined;
  if (typeof setting === 'number')
    return { replicas: positiveInteger('options.waitForReplicas', setting), timeoutMs: 1000 };
  if (typeof setting !== 'object' || setting === null)
    throw new InvalidArgumentError(
      'options.waitForReplicas',
      setting,
      'must be a replica count or { replicas, timeoutMs }',
    );
  const { replicas, timeoutMs } = setting as { replicas?: unknown; timeoutMs?: unknown };
  return {
    replicas: positiveInteger('options.waitForReplicas.replicas', replicas),
    timeoutMs: Math.ceil(durationOption('options.waitForReplicas.timeoutMs', timeoutMs, 1000)),
  };
}
