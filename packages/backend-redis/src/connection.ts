import {
  BackendError,
  InvalidArgumentError,
  type Logger,
  NotSupportedError,
  type OpenContext,
  parseBackendUrl,
} from '@duetime/core';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import { mapRedisError } from './errors.js';
import { type RedisClient, within } from './scripts.js';

/** Checks a `redis://` or `rediss://` URL early, so a typo is an InvalidArgumentError, not a hang. */
export function parseRedisUrl(value: unknown, field = 'connection.url'): { url: string; display: string } {
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

/** Whether the client is a Redis Cluster (it lists its nodes). */
export function isCluster(client: RedisClient): client is Cluster {
  return typeof (client as Partial<Cluster>).nodes === 'function';
}

/**
 * The client of `connection`: the application's (an ioredis `Redis` or `Cluster`, judged by shape so that
 * another copy of ioredis works too), or one created from the URL, closed with the backend, that fails
 * commands after one reconnection attempt and reconnects in the background with capped backoff.
 */
export async function openClient(
  connection: { url?: string; client?: RedisClient },
  ctx: Pick<OpenContext<unknown>, 'connect' | 'onClose' | 'logger' | 'connectTimeoutMs'>,
  options: { prefix: string; requestTimeoutMs: number; redisOptions: RedisOptions | undefined },
): Promise<{ client: RedisClient; target: string; owned: boolean }> {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError('connection', connection, 'must be { url } or { client }');
  const { client } = connection;
  if (client !== undefined) {
    const shaped = client as Partial<Redis> | null;
    if (typeof shaped?.evalsha !== 'function' || typeof shaped.duplicate !== 'function' || !shaped.options)
      throw new InvalidArgumentError('connection.client', client, 'must be an ioredis Redis or Cluster');
    if (connection.url !== undefined)
      throw new InvalidArgumentError('connection', '{ url, client }', 'give either url or client, not both');
    if (client.options.keyPrefix)
      throw new InvalidArgumentError(
        'connection.client',
        `client with keyPrefix ${JSON.stringify(client.options.keyPrefix)}`,
        'ioredis would prefix only some of the keys duetime uses; pass a client without keyPrefix and name the store with options.prefix',
      );
    return { client, target: describeClient(client), owned: false };
  }
  const { url, display } = parseRedisUrl(connection.url);
  const redis = new Redis(url, {
    lazyConnect: true,
    connectTimeout: ctx.connectTimeoutMs,
    commandTimeout: options.requestTimeoutMs,
    maxRetriesPerRequest: 1,
    connectionName: `duetime:${options.prefix}`,
    retryStrategy: (times) => Math.min(2000, 50 * 2 ** Math.min(times, 6)) + Math.floor(Math.random() * 50),
    ...options.redisOptions,
  });
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => {
    lastError = error;
    ctx.logger.debug('redis connection error', { error: error.message });
  });
  try {
    await ctx.connect(`redis ${display}`, () =>
      redis.connect().catch((error: unknown) => {
        const reason = lastError ?? error;
        throw new BackendError(
          'connect',
          `could not connect to redis ${display}: ${reason instanceof Error ? reason.message : String(reason)}`,
          { cause: reason, transient: !/WRONGPASS|NOAUTH|NOPERM/.test(String(reason)) },
        );
      }),
    );
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  ctx.onClose(async () => {
    await redis.quit().catch((error: unknown) => {
      ctx.logger.debug('redis quit failed; disconnecting', { error: mapRedisError(error, 'close', display) });
    });
    redis.disconnect();
  });
  return { client: redis, target: display, owned: true };
}

/** `host:port` of a client the application passed in, for messages. */
function describeClient(client: RedisClient): string {
  if (isCluster(client)) {
    const nodes = client.nodes('all').map((n) => `${n.options.host}:${n.options.port}`);
    return `cluster ${nodes.join(',') || '(no nodes yet)'}`;
  }
  const { host, port, path, db } = client.options;
  return path ? `${path}${db ? `/${db}` : ''}` : `${host}:${port}${db ? `/${db}` : ''}`;
}

/**
 * The first commands on a client, within `timeoutMs`: checks the server speaks Redis 7 or later (script
 * flags, effects replication of scripts that read the clock), then runs `load` (scripts, store checks),
 * then warns about settings that lose data silently (an eviction policy other than `noeviction`, no
 * persistence at all; servers that forbid CONFIG are not checked) and, with `replicas`, about masters with
 * fewer replicas connected (every replicated write would fail after the WAIT timeout).
 */
export async function checkServer(
  client: RedisClient,
  target: string,
  options: { timeoutMs: number; logger: Logger; replicas: number | undefined },
  load: () => Promise<void>,
): Promise<void> {
  const { timeoutMs, logger, replicas } = options;
  const check = async () => {
    const version = /redis_version:(\d+)\.(\d+)/.exec(String(await client.info('server')));
    if (!version || Number(version[1]) < 7)
      throw new NotSupportedError(
        `redis ${target} runs version ${version ? `${version[1]}.${version[2]}` : 'unknown'}; duetime needs Redis 7 or later`,
      );
    await load();
    if (!isCluster(client)) {
      const setting = async (name: string) =>
        ((await client.config('GET', name).catch(() => [])) as string[])[1];
      const policy = await setting('maxmemory-policy');
      if (policy !== undefined && policy !== 'noeviction')
        logger.warn('redis may evict duetime keys: set maxmemory-policy to noeviction', { target, policy });
      const nothing =
        'redis persists nothing (appendonly no, no save points): a restart loses every schedule';
      if ((await setting('appendonly')) === 'no' && !(await setting('save')))
        logger.info(nothing, { target });
    }
    for (const node of replicas === undefined ? [] : isCluster(client) ? client.nodes('master') : [client]) {
      const info = await within(2000, node.info('replication')).catch(() => undefined);
      const connected = Number(/connected_slaves:(\d+)/.exec(info ?? '')?.[1] ?? 0);
      // An unreachable master is the cluster's own business.
      if (info !== undefined && connected < replicas!)
        logger.warn(
          'redis has fewer replicas than waitForReplicas asks for: replicated writes will fail until more connect',
          { target, node: `${node.options.host}:${node.options.port}`, connected, waitForReplicas: replicas },
        );
    }
  };
  const late = `redis ${target} did not answer within ${timeoutMs} ms`;
  try {
    await within(timeoutMs, check(), () => new BackendError('connect', late, { transient: true }));
  } catch (error) {
    throw mapRedisError(error, 'connect', target);
  }
}
