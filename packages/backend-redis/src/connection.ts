import {
  BackendError,
  InvalidArgumentError,
  type Logger,
  NotSupportedError,
  parseBackendUrl,
} from '@duetime/core';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import { mapRedisError } from './errors.js';
import { type RedisClient, within } from './scripts.js';

/** A parsed, checked connection URL and how to show it without its password. */
export interface RedisUrl {
  url: string;
  /** `redis://user@host:port/db`, never with the password. */
  display: string;
}

/** Checks a `redis://` or `rediss://` URL early, so a typo is an InvalidArgumentError, not a hang. */
export function parseRedisUrl(value: unknown, field = 'connection.url'): RedisUrl {
  const { url: parsed, display } = parseBackendUrl(value, {
    field,
    schemes: ['redis:', 'rediss:'],
    example: 'redis://[user:password@]host[:port][/db]',
    // ioredis reads query parameters as client options: they are left to it.
    params: 'any',
  });
  const shown = display.replace(/\/$/, '');
  try {
    // ioredis decodes them itself and would throw a URIError from inside the factory.
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    throw new InvalidArgumentError(field, shown, 'has a malformed percent-escape in its user or password');
  }
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db))
    throw new InvalidArgumentError(field, shown, `has database ${JSON.stringify(db)}; expected a number`);
  return { url: value as string, display: shown };
}

/**
 * Whether `value` is an ioredis `Redis` or `Cluster`. Judged by shape rather than `instanceof`, so a client
 * from the application's own copy of ioredis is accepted too.
 */
export function isRedisClient(value: unknown): value is RedisClient {
  const client = value as Partial<Redis> | null;
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof client.evalsha === 'function' &&
    typeof client.duplicate === 'function' &&
    typeof client.options === 'object'
  );
}

/** Whether the client is a Redis Cluster (it lists its nodes). */
export function isCluster(client: RedisClient): client is Cluster {
  return typeof (client as Partial<Cluster>).nodes === 'function';
}

/** `host:port` of a client the application passed in, for messages. */
export function describeClient(client: RedisClient): string {
  if (isCluster(client)) {
    const nodes = client.nodes('all').map((n) => `${n.options.host}:${n.options.port}`);
    return `cluster ${nodes.join(',') || '(no nodes yet)'}`;
  }
  const { host, port, path, db } = client.options;
  return path ? `${path}${db ? `/${db}` : ''}` : `${host}:${port}${db ? `/${db}` : ''}`;
}

export interface ConnectOptions {
  connectTimeoutMs: number;
  requestTimeoutMs: number;
  connectionName: string;
  redisOptions?: RedisOptions;
}

/**
 * Creates and connects a client from a URL, with settings that turn an unreachable server into an error
 * instead of an endless wait: a connect timeout, commands that fail after one reconnection attempt instead
 * of queueing forever, and reconnection in the background with capped backoff so a running component
 * recovers once the server is back.
 */
export async function connectUrl(url: RedisUrl, options: ConnectOptions): Promise<Redis> {
  const client = new Redis(url.url, {
    lazyConnect: true,
    connectTimeout: options.connectTimeoutMs,
    commandTimeout: options.requestTimeoutMs,
    maxRetriesPerRequest: 1,
    connectionName: options.connectionName,
    retryStrategy: (times) => Math.min(2000, 50 * 2 ** Math.min(times, 6)) + Math.floor(Math.random() * 50),
    ...options.redisOptions,
  });
  let lastError: Error | undefined;
  const record = (error: Error) => {
    lastError = error;
  };
  client.on('error', record);
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    const reason = lastError ?? error;
    throw new BackendError(
      'connect',
      `could not connect to redis ${url.display}: ${reason instanceof Error ? reason.message : String(reason)}`,
      { cause: reason, transient: !/WRONGPASS|NOAUTH|NOPERM/.test(String(reason)) },
    );
  } finally {
    client.off('error', record);
  }
  return client;
}

/**
 * The first commands on a client: checks the server answers within `timeoutMs`, speaks Redis 7 or later
 * (script flags, effects replication of scripts that read the clock) and knows duetime's scripts.
 */
export async function checkServer(
  client: RedisClient,
  target: string,
  timeoutMs: number,
  load: () => Promise<void>,
): Promise<void> {
  const check = async () => {
    const info = String(await client.info('server'));
    const version = /redis_version:(\d+)\.(\d+)/.exec(info);
    if (!version || Number(version[1]) < 7)
      throw new NotSupportedError(
        `redis ${target} runs version ${version ? `${version[1]}.${version[2]}` : 'unknown'}; duetime needs Redis 7 or later`,
      );
    await load();
  };
  try {
    await within(
      timeoutMs,
      check(),
      () =>
        new BackendError('connect', `redis ${target} did not answer within ${timeoutMs} ms`, {
          transient: true,
        }),
    );
  } catch (error) {
    throw mapRedisError(error, 'connect', target);
  }
}

/**
 * Warns about server settings that lose duetime's data silently: an eviction policy other than
 * `noeviction` (it may drop schedules, or leases and claims before their time), and no persistence at all.
 * Servers that forbid CONFIG (managed services) are not checked.
 */
export async function adviseOnConfig(client: RedisClient, target: string, logger: Logger): Promise<void> {
  if (isCluster(client)) return;
  try {
    const policy = ((await client.config('GET', 'maxmemory-policy')) as string[])[1];
    if (policy !== undefined && policy !== 'noeviction')
      logger.warn('redis may evict duetime keys: set maxmemory-policy to noeviction', { target, policy });
    const [, appendonly] = (await client.config('GET', 'appendonly')) as string[];
    const [, save] = (await client.config('GET', 'save')) as string[];
    if (appendonly === 'no' && (save === undefined || save === ''))
      logger.info('redis persists nothing (appendonly no, no save points): a restart loses every schedule', {
        target,
      });
  } catch {
    // CONFIG is disabled or not permitted for this user: nothing to advise.
  }
}

/**
 * Warns when a server (each master, on a cluster) has fewer replicas connected than `waitForReplicas` asks
 * for: until more connect, every replicated write will fail after the WAIT timeout.
 */
export async function adviseOnReplicas(
  client: RedisClient,
  target: string,
  replicas: number,
  logger: Logger,
): Promise<void> {
  const nodes = isCluster(client) ? client.nodes('master') : [client];
  for (const node of nodes) {
    const info = await within(2000, node.info('replication')).catch(() => undefined);
    if (info === undefined) continue; // an unreachable master: the cluster's own business
    const connected = Number(/connected_slaves:(\d+)/.exec(info)?.[1] ?? 0);
    if (connected < replicas)
      logger.warn(
        'redis has fewer replicas than waitForReplicas asks for: replicated writes will fail until more connect',
        {
          target,
          node: `${node.options.host}:${node.options.port}`,
          connected,
          waitForReplicas: replicas,
        },
      );
  }
}
