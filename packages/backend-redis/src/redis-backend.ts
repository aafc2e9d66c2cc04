import { randomBytes } from 'node:crypto';
import {
  type Backend,
  type Clock,
  defineBackend,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  NotFoundError,
  type OptionReader,
  positiveInteger,
} from '@duetime/core';
import type { Redis, RedisOptions } from 'ioredis';
import { Committer } from './commit.js';
import {
  adviseOnConfig,
  adviseOnReplicas,
  checkServer,
  connectUrl,
  describeClient,
  isRedisClient,
  parseRedisUrl,
} from './connection.js';
import { mapRedisError } from './errors.js';
import { KeySpace, storePrefix } from './keys.js';
import { RedisCursors, RedisLeases } from './leases.js';
import { type RedisClient, type ReplicaWait, ScriptRunner } from './scripts.js';
import { RedisStore, type RedisUnit } from './store.js';
import { ChangeWatcher } from './watch.js';

/** Where the backend connects: a URL (it creates and closes its own client) or the application's client. */
export type RedisConnection = { url: string; client?: undefined } | { client: RedisClient; url?: undefined };

export interface RedisBackendOptions {
  /**
   * Names this store: every key is `{prefix}:...` (default `duetime`). Stores with different prefixes are
   * independent. The braces make it a Redis Cluster hash tag, so a store lives in one slot.
   */
  prefix?: string;
  /** Stamps events and drives dispatchers (default: the system clock). Leases, cursors and claims use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** For clients created from a URL: how long to wait for the TCP connection, in ms (default 5,000). */
  connectTimeoutMs?: number;
  /** How long the first commands (version check, script loading) may take before the factory fails, in ms (default 10,000). */
  startupTimeoutMs?: number;
  /**
   * Delivery claims (default on, with a 5,000 ms time to live on the server's clock, renewed every third of
   * it): a claimed schedule is skipped by other deliveries until its unit ends or, when its process died,
   * the claim lapses (the next delivery then counts the crash as an attempt). `false` turns them off: then
   * two dispatchers may both run a processor and exactly one commits, and crashes are not counted.
   */
  claims?: boolean | { ttlMs?: number /** @deprecated Renamed to `ttlMs`. */; ttl?: number };
  /**
   * Longest wait for one command, in ms (default 30,000). On clients created from a URL it is ioredis's
   * `commandTimeout`; on the application's client duetime enforces it around its own calls. A timed-out
   * commit is retried safely (see `commitTimeoutMs`).
   */
  requestTimeoutMs?: number;
  /** How long a commit keeps retrying through a lost connection or a restarting server, in ms (default 15,000). */
  commitTimeoutMs?: number;
  /**
   * Open an existing store only (default true: any prefix can be used at once). With `false`, a prefix
   * under which nothing was ever written (no schedule version counter, no lease token counter) is a
   * `NotFoundError`. Opening never writes a key either way. For tools that only inspect.
   */
  migrate?: boolean;
  /** Extra ioredis options for clients created from a URL (TLS, timeouts). Ignored with `{ client }`. */
  redisOptions?: RedisOptions;
  /**
   * Replicated writes (off by default): after each commit, lease acquisition or renewal and cursor advance,
   * `WAIT replicas timeout` on the same connection, so the call returns only once that many replicas hold
   * the write. A write not confirmed in time fails with a transient `BackendError` (a commit retries within
   * `commitTimeoutMs`, without applying twice). A number is the replica count with a 1,000 ms timeout.
   */
  waitForReplicas?: number | { replicas: number; timeoutMs?: number };
  /** @deprecated Renamed to {@link connectTimeoutMs}; the old name is removed in the next minor version. */
  connectTimeout?: number;
  /** @deprecated Renamed to {@link startupTimeoutMs}; the old name is removed in the next minor version. */
  startupTimeout?: number;
  /** @deprecated Renamed to {@link requestTimeoutMs}; the old name is removed in the next minor version. */
  commandTimeout?: number;
  /** @deprecated Renamed to {@link commitTimeoutMs}; the old name is removed in the next minor version. */
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
    const { prefix, replicaWait } = options;
    if (typeof connection !== 'object' || connection === null)
      throw new InvalidArgumentError('connection', connection, 'must be { url } or { client }');
    if (options.claimsTtlRenamed)
      logger.warn(
        'createRedisBackend: options.claims.ttl is deprecated and will be removed in the next minor version; use options.claims.ttlMs',
        { option: 'claims.ttl', replacement: 'claims.ttlMs' },
      );
    let client: RedisClient;
    let owned: Redis | undefined;
    let target: string;
    if (connection.client !== undefined) {
      if (!isRedisClient(connection.client))
        throw new InvalidArgumentError(
          'connection.client',
          connection.client,
          'must be an ioredis Redis or Cluster',
        );
      if (connection.url !== undefined)
        throw new InvalidArgumentError(
          'connection',
          '{ url, client }',
          'give either url or client, not both',
        );
      const { keyPrefix } = connection.client.options;
      if (keyPrefix)
        throw new InvalidArgumentError(
          'connection.client',
          `client with keyPrefix ${JSON.stringify(keyPrefix)}`,
          'ioredis would prefix only some of the keys duetime uses; pass a client without keyPrefix and name the store with options.prefix',
        );
      client = connection.client;
      target = describeClient(client);
    } else {
      const url = parseRedisUrl(connection.url);
      target = url.display;
      const redis = await ctx.connect(`redis ${target}`, () =>
        connectUrl(url, {
          connectTimeoutMs: ctx.connectTimeoutMs,
          requestTimeoutMs: options.requestTimeoutMs,
          connectionName: `duetime:${prefix}`,
          ...(options.redisOptions ? { redisOptions: options.redisOptions } : {}),
        }),
      );
      owned = redis;
      ctx.onClose(async () => {
        await redis.quit().catch((error: unknown) => {
          logger.debug('redis quit failed; disconnecting', { error: mapRedisError(error, 'close', target) });
        });
        redis.disconnect();
      });
      redis.on('error', (error: Error) => logger.debug('redis connection error', { error: error.message }));
      client = redis;
    }

    const keys = new KeySpace(prefix);
    const runner = new ScriptRunner(client, owned ? undefined : options.requestTimeoutMs, replicaWait);
    await checkServer(client, target, options.startupTimeoutMs, async () => {
      await runner.load();
      await adviseOnConfig(client, target, logger);
      if (replicaWait) await adviseOnReplicas(client, target, replicaWait.replicas, logger);
      if (!options.migrate) await requireExistingStore(runner, keys, target);
    });

    const senderId = randomBytes(8).toString('base64url');
    const watcher = new ChangeWatcher({
      client,
      channel: keys.channel,
      senderId,
      ...(owned ? { connectionName: `duetime-watch:${prefix}` } : {}),
      logger,
    });
    ctx.onClose(() => watcher.close());
    const committer = new Committer({
      runner,
      keys,
      target,
      logger,
      clock: ctx.clock,
      senderId,
      commitTimeoutMs: options.commitTimeoutMs,
      markerTtl: Math.max(60_000, 4 * Math.min(options.commitTimeoutMs, MAX_TIMER_MS)),
    });
    const store = new RedisStore({
      runner,
      keys,
      target,
      logger,
      senderId,
      claimTtl: options.claimTtl,
      committer,
      watcher,
    });
    const context = { keys, runner, target };
    return {
      store,
      leases: new RedisLeases(context),
      cursors: new RedisCursors(context),
      capabilities: {
        multiProcess: true,
        durable: true,
        sql: false,
        exclusiveClaims: options.claimTtl !== undefined,
      },
      describe: `redis backend (prefix ${prefix})`,
    };
  },
});

/**
 * Opens a duetime backend on Redis 7 or later: the transactional store, leases and cursors.
 *
 * With `{ url }` the backend creates its connection and `close()` closes it; with `{ client }` it uses the
 * application's ioredis client (a `Redis` or a `Cluster`) and never closes it. A change subscriber (a
 * duplicate of the client) is created only while a dispatcher watches.
 *
 * @example
 * const backend = await createRedisBackend({ url: 'redis://127.0.0.1:6379' }, { prefix: 'billing' });
 *
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

/**
 * With `migrate: false`: a store is there when its schedule version counter or its lease token counter
 * exists (both only grow and are never deleted). Reads only.
 */
async function requireExistingStore(runner: ScriptRunner, keys: KeySpace, target: string): Promise<void> {
  const found = await runner.call((c) => c.exists(keys.version, keys.leaseToken));
  if (found === 0)
    throw new NotFoundError(
      `redis store ${keys.prefix}`,
      `no duetime store with the prefix ${JSON.stringify(keys.prefix)} on redis ${target}`,
    );
}

function claimSetting(claims: unknown): { claimTtl: number | undefined; claimsTtlRenamed: boolean } {
  if (claims === undefined || claims === true) return { claimTtl: 5000, claimsTtlRenamed: false };
  if (claims === false) return { claimTtl: undefined, claimsTtlRenamed: false };
  if (typeof claims !== 'object' || claims === null || Array.isArray(claims))
    throw new InvalidArgumentError('options.claims', claims, 'must be a boolean or { ttlMs }');
  const { ttlMs, ttl } = claims as { ttlMs?: unknown; ttl?: unknown };
  if (ttl !== undefined && ttlMs !== undefined)
    throw new InvalidArgumentError(
      'options.claims.ttl',
      ttl,
      'is the old name of options.claims.ttlMs; give only ttlMs',
    );
  const [field, value] = ttl !== undefined ? ['options.claims.ttl', ttl] : ['options.claims.ttlMs', ttlMs];
  return {
    claimTtl: value === undefined ? 5000 : duration(field, value, { max: MAX_TIMER_MS }),
    claimsTtlRenamed: ttl !== undefined,
  };
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
    timeoutMs: Math.ceil(
      timeoutMs === undefined
        ? 1000
        : duration('options.waitForReplicas.timeoutMs', timeoutMs, { max: MAX_TIMER_MS }),
    ),
  };
}
