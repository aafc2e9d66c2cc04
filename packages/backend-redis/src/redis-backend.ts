import { randomBytes } from 'node:crypto';
import {
  type Backend,
  type Clock,
  ClosedError,
  createStore,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  silentLogger,
} from '@duetime/core';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { adviseOnConfig, checkServer, connectUrl, describeClient, parseRedisUrl } from './connection.js';
import { mapRedisError } from './errors.js';
import { KeySpace, storePrefix } from './keys.js';
import { RedisCursors, RedisLeases } from './leases.js';
import { type RedisClient, ScriptRunner } from './scripts.js';
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
  connectTimeout?: number;
  /** How long the first commands (version check, script loading) may take before the factory fails, in ms (default 10,000). */
  startupTimeout?: number;
  /**
   * Delivery claims: a delivery claims its schedule (`SET NX PX`) so other dispatchers skip it meanwhile
   * (default on, with a 5,000 ms time to live renewed every third of it). `false` turns them off: then two
   * dispatchers may both run a processor and exactly one commits.
   */
  claims?: boolean | { ttl?: number };
  /**
   * Longest wait for one command, in ms (default 30,000). On clients created from a URL it is ioredis's
   * `commandTimeout`; on the application's client duetime enforces it around its own calls. A timed-out
   * commit is retried safely (see `commitRetryWindow`).
   */
  commandTimeout?: number;
  /** How long a commit keeps retrying through a lost connection or a restarting server, in ms (default 15,000). */
  commitRetryWindow?: number;
  /** Extra ioredis options for clients created from a URL (TLS, timeouts). Ignored with `{ client }`. */
  redisOptions?: RedisOptions;
}

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
  options: RedisBackendOptions = {},
): Promise<Backend<undefined>> {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError('connection', connection, 'must be { url } or { client }');
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', options, 'must be an object');
  const prefix = storePrefix(options.prefix ?? 'duetime');
  const connectTimeout = duration('options.connectTimeout', options.connectTimeout ?? 5000, {
    max: MAX_TIMER_MS,
  });
  const startupTimeout = duration('options.startupTimeout', options.startupTimeout ?? 10_000, {
    max: MAX_TIMER_MS,
  });
  const commitRetryWindow = duration('options.commitRetryWindow', options.commitRetryWindow ?? 15_000, {
    allowZero: true,
  });
  const commandTimeout = duration('options.commandTimeout', options.commandTimeout ?? 30_000, {
    max: MAX_TIMER_MS,
  });
  const claimTtl = claimSetting(options.claims);
  const logger = options.logger ?? silentLogger;

  let client: RedisClient;
  let owned: Redis | undefined;
  let target: string;
  if (connection.client !== undefined) {
    if (!(connection.client instanceof Redis) && !(connection.client instanceof Cluster))
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
      connectTimeout,
      commandTimeout,
      connectionName: `duetime:${prefix}`,
      ...(options.redisOptions ? { redisOptions: options.redisOptions } : {}),
    });
    owned.on('error', (error: Error) => logger.debug('redis connection error', { error: error.message }));
    client = owned;
  }

  const runner = new ScriptRunner(client, owned ? undefined : commandTimeout);
  try {
    await checkServer(client, target, startupTimeout, async () => {
      await runner.load();
      await adviseOnConfig(client, target, logger);
    });
  } catch (error) {
    owned?.disconnect();
    throw error;
  }

  const keys = new KeySpace(prefix);
  const senderId = randomBytes(8).toString('base64url');
  let closed = false;
  const check = () => {
    if (closed) throw new ClosedError(`redis backend (prefix ${prefix})`);
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
    commitRetryWindow,
    markerTtl: Math.max(60_000, 4 * commitRetryWindow),
    check,
  });
  const store = createStore(driver, { ...(options.clock ? { clock: options.clock } : {}), logger });
  const context = { keys, runner, target, check };
  let closing: Promise<void> | undefined;
  return {
    name: 'redis',
    store,
    leases: new RedisLeases(context),
    cursors: new RedisCursors(context),
    capabilities: { multiProcess: true, durable: true, sql: false, exclusiveClaims: claimTtl !== undefined },
    close() {
      closing ??= (async () => {
        await store.close();
        closed = true;
        if (owned) {
          await owned.quit().catch((error: unknown) => {
            logger.debug('redis quit failed; disconnecting', {
              error: mapRedisError(error, 'close', target),
            });
          });
          owned.disconnect();
        }
      })();
      return closing;
    },
  };
}

function claimSetting(claims: RedisBackendOptions['claims']): number | undefined {
  if (claims === undefined || claims === true) return 5000;
  if (claims === false) return undefined;
  if (typeof claims !== 'object' || claims === null)
    throw new InvalidArgumentError('options.claims', claims, 'must be a boolean or { ttl }');
  return duration('options.claims.ttl', claims.ttl ?? 5000, { max: MAX_TIMER_MS });
}
