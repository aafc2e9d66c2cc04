import { randomBytes } from 'node:crypto';
import {
  type Backend,
  BackendLifecycle,
  booleanOption,
  type Clock,
  ClosedError,
  createStore,
  durationOption,
  guardCursors,
  guardLeases,
  InvalidArgumentError,
  type Logger,
  NotFoundError,
  positiveInteger,
  readFactoryOptions,
} from '@duetime/core';
import type { Redis, RedisOptions } from 'ioredis';
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
import { RedisStoreDriver } from './store.js';
import { ChangeWatcher } from './watch.js';

/** Where the backend connects: a URL (it creates and closes its own client) or the application's client. */
export type RedisConnection = { url: string; client?: undefined } | { client: RedisClient; url?: undefined };

export interface RedisBackendOptions {
  /**
   * Names this store: every key is `{prefix}:...` (default `duetime`). Stores with different prefixes are
   * independent. The braces make it a Redis Cluster hash tag, so a store lives in one slot.
   */
  prefix?: string;
  /** Stamps events and drives dispatchers (default: the system clock). Leases and cursors use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** For clients created from a URL: how long to wait for the TCP connection, in ms (default 5,000). */
  connectTimeoutMs?: number;
  /** How long the first commands (version check, script loading) may take before the factory fails, in ms (default 10,000). */
  startupTimeoutMs?: number;
  /**
   * Delivery claims: a delivery claims its schedule (`SET NX PX`) so other dispatchers skip it meanwhile
   * (default on, with a 5,000 ms time to live renewed every third of it). `false` turns them off: then two
   * dispatchers may both run a processor and exactly one commits.
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
   * the write, and a failover that promotes one of them loses nothing acknowledged. A write not confirmed
   * in time fails with a transient `BackendError` (a commit retries within `commitTimeoutMs`, without
   * applying twice). A number is the replica count with a 1,000 ms timeout. See the README, "Failover".
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
export async function createRedisBackend(
  connection: RedisConnection,
  given: RedisBackendOptions = {},
): Promise<Backend<undefined>> {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError('connection', connection, 'must be { url } or { client }');
  const { options, clock, logger } = readFactoryOptions(given, {
    factory: 'createRedisBackend',
    renamed: RENAMED_OPTIONS,
  });
  const prefix = storePrefix(options.prefix ?? 'duetime');
  const connectTimeoutMs = durationOption('options.connectTimeoutMs', options.connectTimeoutMs, 5000);
  const startupTimeoutMs = durationOption('options.startupTimeoutMs', options.startupTimeoutMs, 10_000);
  const commitTimeoutMs = durationOption('options.commitTimeoutMs', options.commitTimeoutMs, 15_000, {
    allowZero: true,
    max: Number.POSITIVE_INFINITY,
  });
  const requestTimeoutMs = durationOption('options.requestTimeoutMs', options.requestTimeoutMs, 30_000);
  const claimTtl = claimSetting(options.claims, logger);
  const migrate = booleanOption('options.migrate', options.migrate, true);
  const replicaWait = replicaWaitSetting(options.waitForReplicas);

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
      throw new InvalidArgumentError('connection', '{ url, client }', 'give either url or client, not both');
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
    if (options.redisOptions?.keyPrefix)
      throw new InvalidArgumentError(
        'options.redisOptions.keyPrefix',
        options.redisOptions.keyPrefix,
        'is not supported; name the store with options.prefix',
      );
    target = url.display;
    owned = await connectUrl(url, {
      connectTimeoutMs,
      requestTimeoutMs,
      connectionName: `duetime:${prefix}`,
      ...(options.redisOptions ? { redisOptions: options.redisOptions } : {}),
    });
    owned.on('error', (error: Error) => logger.debug('redis connection error', { error: error.message }));
    client = owned;
  }

  const keys = new KeySpace(prefix);
  const runner = new ScriptRunner(client, owned ? undefined : requestTimeoutMs, replicaWait);
  try {
    await checkServer(client, target, startupTimeoutMs, async () => {
      await runner.load();
      await adviseOnConfig(client, target, logger);
      if (replicaWait) await adviseOnReplicas(client, target, replicaWait.replicas, logger);
      if (!migrate) await requireExistingStore(runner, keys, target);
    });
  } catch (error) {
    owned?.disconnect();
    throw error;
  }

  const senderId = randomBytes(8).toString('base64url');
  const lifecycle = new BackendLifecycle(`redis backend (prefix ${prefix})`);
  // The store's parts keep working until the store has closed (closing drains them); leases and cursors
  // are refused from the moment close() is called (guardLeases, guardCursors).
  let storeClosed = false;
  const check = () => {
    if (storeClosed) throw new ClosedError(lifecycle.what);
  };
  const watcher = new ChangeWatcher({
    client,
    channel: keys.channel,
    senderId,
    ...(owned ? { connectionName: `duetime-watch:${prefix}` } : {}),
    logger,
  });
  const driver = new RedisStoreDriver({
    runner,
    keys,
    target,
    logger,
    senderId,
    watcher,
    claimTtl,
    commitRetryWindow: commitTimeoutMs,
    markerTtl: Math.max(60_000, 4 * commitTimeoutMs),
    check,
  });
  const store = createStore(driver, { clock, logger });
  const context = { keys, runner, target, check };
  return {
    name: 'redis',
    store,
    leases: guardLeases(new RedisLeases(context), lifecycle),
    cursors: guardCursors(new RedisCursors(context), lifecycle),
    capabilities: { multiProcess: true, durable: true, sql: false, exclusiveClaims: claimTtl !== undefined },
    close: () =>
      lifecycle.close(async () => {
        await store.close();
        storeClosed = true;
        if (owned) {
          await owned.quit().catch((error: unknown) => {
            logger.debug('redis quit failed; disconnecting', {
              error: mapRedisError(error, 'close', target),
            });
          });
          owned.disconnect();
        }
      }),
  };
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

function claimSetting(claims: RedisBackendOptions['claims'], logger: Logger): number | undefined {
  if (claims === undefined || claims === true) return 5000;
  if (claims === false) return undefined;
  if (typeof claims !== 'object' || claims === null || Array.isArray(claims))
    throw new InvalidArgumentError('options.claims', claims, 'must be a boolean or { ttlMs }');
  let ttlMs = claims.ttlMs;
  if (claims.ttl !== undefined) {
    if (ttlMs !== undefined)
      throw new InvalidArgumentError(
        'options.claims.ttl',
        claims.ttl,
        'is the old name of options.claims.ttlMs; give only ttlMs',
      );
    logger.warn(
      'createRedisBackend: options.claims.ttl is deprecated and will be removed in the next minor version; use options.claims.ttlMs',
      { option: 'claims.ttl', replacement: 'claims.ttlMs' },
    );
    ttlMs = claims.ttl;
  }
  return durationOption(
    claims.ttl !== undefined && claims.ttlMs === undefined ? 'options.claims.ttl' : 'options.claims.ttlMs',
    ttlMs,
    5000,
  );
}

function replicaWaitSetting(setting: RedisBackendOptions['waitForReplicas']): ReplicaWait | undefined {
  if (setting === undefined) return undefined;
  if (typeof setting === 'number')
    return { replicas: positiveInteger('options.waitForReplicas', setting), timeoutMs: 1000 };
  if (typeof setting !== 'object' || setting === null)
    throw new InvalidArgumentError(
      'options.waitForReplicas',
      setting,
      'must be a replica count or { replicas, timeoutMs }',
    );
  return {
    replicas: positiveInteger('options.waitForReplicas.replicas', setting.replicas),
    timeoutMs: Math.ceil(durationOption('options.waitForReplicas.timeoutMs', setting.timeoutMs, 1000)),
  };
}
