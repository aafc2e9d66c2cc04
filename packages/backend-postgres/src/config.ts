import { userInfo } from 'node:os';
import {
  type Clock,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  positiveInteger,
  silentLogger,
  systemClock,
} from '@duetime/core';
import pg from 'pg';
import type { ConnectionTarget } from './errors.js';

/**
 * Where the backend's connections come from: a URL (the backend creates, owns and closes a pool), or the
 * application's own `pg.Pool` (shared, so `tx.sql` runs on the application's connections; never closed
 * by duetime).
 */
export type PostgresConnection = { connectionString: string } | { pool: pg.Pool };

export interface PostgresBackendOptions {
  /** The schema holding duetime's tables (default `duetime`); created by the migrations when missing. */
  schema?: string;
  /** Stamps events and drives the dispatcher (default: the system clock). Leases use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /**
   * Run pending migrations when opening (default true). With false, opening checks that the schema is at
   * this package's version and fails otherwise: for teams that run {@link migrate} separately.
   */
  migrate?: boolean;
  /** Connections in the pool the backend creates from a URL (default 10). Ignored with `pool`. */
  poolSize?: number;
  /**
   * How long to wait for a connection before failing (default 10,000 ms): applied to the pool created
   * from a URL and the LISTEN connection, and to the first contact when opening, whatever the pool.
   */
  connectionTimeoutMs?: number;
  /** `application_name` of the connections the backend opens (default `duetime`), shown in pg_stat_activity. */
  applicationName?: string;
  /**
   * Run the frequent queries (due lookups, loads, leases, cursors) as named prepared statements, parsed
   * and planned once per connection (default true). Turn off behind a pooler that cannot keep them
   * (PgBouncer in transaction mode before 1.21, or without `max_prepared_statements`).
   */
  preparedStatements?: boolean;
  /**
   * PostgreSQL's `idle_in_transaction_session_timeout` for the connections the backend creates from a URL
   * (default 60,000 ms; 0 turns it off). A process frozen inside a transaction (a stopped container, a VM
   * pause, a debugger) keeps its row locks until its session ends; with this the server ends the session
   * and releases them, and the frozen process's transaction fails instead of committing late. Keep it
   * above the longest pause your processors make inside `tx.sql` transactions. With `pool`, set it on
   * your pool's config yourself.
   */
  idleInTransactionTimeoutMs?: number;
}

/** Options after validation, with what the connection resolved to. */
export interface ResolvedConfig {
  pool: pg.Pool;
  ownsPool: boolean;
  /** Config for the dedicated LISTEN connection. */
  listenClient: () => pg.Client;
  target: ConnectionTarget;
  secret: string | undefined;
  schema: string;
  clock: Clock;
  logger: Logger;
  migrate: boolean;
  connectionTimeoutMs: number;
  preparedStatements: boolean;
}

const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Validates a schema name: a plain identifier of at most 63 bytes, not a reserved `pg_` name. */
export function schemaName(value: unknown, field = 'options.schema'): string {
  if (typeof value !== 'string' || !SCHEMA_NAME.test(value))
    throw new InvalidArgumentError(
      field,
      value,
      'must be a plain identifier (letters, digits, _; not starting with a digit)',
    );
  if (Buffer.byteLength(value) > 63) throw new InvalidArgumentError(field, value, 'must be at most 63 bytes');
  if (value.toLowerCase().startsWith('pg_'))
    throw new InvalidArgumentError(field, value, 'must not start with pg_ (reserved by PostgreSQL)');
  return value;
}

/** `postgres://user:secret@host/db` → `postgres://user:***@host/db`, for error messages. */
export function redactUrl(url: string): string {
  return url
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/?#@]*):[^@/?#]*@/i, '$1:***@')
    .replace(/(password=)[^&]*/gi, '$1***');
}

function connectionString(value: unknown): string {
  const field = 'connection.connectionString';
  if (typeof value !== 'string' || value.length === 0)
    throw new InvalidArgumentError(
      field,
      typeof value === 'string' ? value : value,
      'must be a non-empty URL string',
    );
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(
      field,
      redactUrl(value),
      'is not a URL like postgres://user:password@host:5432/database',
    );
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:')
    throw new InvalidArgumentError(field, redactUrl(value), 'must start with postgres:// or postgresql://');
  if (!url.hostname && !url.searchParams.get('host'))
    throw new InvalidArgumentError(field, redactUrl(value), 'names no host (postgres://host:5432/database)');
  // pg reads the URL with its own parser, which refuses some URLs that WHATWG accepts (an IPv6 host in a
  // URL that also holds a space or a stray '%', for one): ask it now, so the error is typed and names the field.
  try {
    new pg.Client({ connectionString: value });
  } catch (error) {
    throw new InvalidArgumentError(
      field,
      redactUrl(value),
      `cannot be read by pg (${error instanceof Error ? error.message : String(error)}); percent-encode spaces and '%' in it`,
    );
  }
  return value;
}

function isPool(value: unknown): value is pg.Pool {
  const pool = value as Partial<pg.Pool> | null;
  return (
    typeof pool === 'object' &&
    pool !== null &&
    typeof pool.connect === 'function' &&
    typeof pool.query === 'function' &&
    typeof pool.on === 'function'
  );
}

/** Reads what a pg config resolves to (defaults and PG* environment variables included), without connecting. */
function resolveTarget(
  config: pg.ClientConfig,
  schema: string,
): { target: ConnectionTarget; secret?: string } {
  const probe = new pg.Client(config);
  const password = (probe as unknown as { password?: unknown }).password;
  return {
    target: {
      host: probe.host,
      port: probe.port,
      database: probe.database ?? probe.user ?? userInfo().username,
      user: probe.user ?? userInfo().username,
      schema,
    },
    ...(typeof password === 'string' && password.length > 0 ? { secret: password } : {}),
  };
}

/** Validates everything given to `createPostgresBackend` or `migrate`, and creates the pool if it is ours. */
export function resolveConfig(
  connection: PostgresConnection,
  options: PostgresBackendOptions = {},
): ResolvedConfig {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError('connection', connection, 'must be { connectionString } or { pool }');
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', options, 'must be an object');
  const schema = schemaName(options.schema ?? 'duetime');
  const connectionTimeoutMs = duration('options.connectionTimeoutMs', options.connectionTimeoutMs ?? 10_000, {
    max: MAX_TIMER_MS,
  });
  const poolSize = positiveInteger('options.poolSize', options.poolSize ?? 10);
  const idleInTransactionTimeoutMs = duration(
    'options.idleInTransactionTimeoutMs',
    options.idleInTransactionTimeoutMs ?? 60_000,
    { allowZero: true, max: MAX_TIMER_MS },
  );
  const applicationName = options.applicationName ?? 'duetime';
  if (
    typeof applicationName !== 'string' ||
    applicationName.length > 63 ||
    /[^\x20-\x7e]/.test(applicationName)
  )
    throw new InvalidArgumentError(
      'options.applicationName',
      applicationName,
      'must be printable ASCII, at most 63 characters',
    );
  if (options.migrate !== undefined && typeof options.migrate !== 'boolean')
    throw new InvalidArgumentError('options.migrate', options.migrate, 'must be a boolean');
  if (options.preparedStatements !== undefined && typeof options.preparedStatements !== 'boolean')
    throw new InvalidArgumentError(
      'options.preparedStatements',
      options.preparedStatements,
      'must be a boolean',
    );
  if (options.clock !== undefined && typeof options.clock?.now !== 'function')
    throw new InvalidArgumentError('options.clock', options.clock, 'must be a Clock { now, setTimer }');
  if (options.logger !== undefined && typeof options.logger?.warn !== 'function')
    throw new InvalidArgumentError(
      'options.logger',
      options.logger,
      'must be a Logger { debug, info, warn, error }',
    );
  const common = {
    schema,
    clock: options.clock ?? systemClock,
    logger: options.logger ?? silentLogger,
    migrate: options.migrate ?? true,
    connectionTimeoutMs,
    preparedStatements: options.preparedStatements ?? true,
  };

  if ('pool' in connection) {
    if (!isPool(connection.pool))
      throw new InvalidArgumentError('connection.pool', connection.pool, 'must be a pg.Pool');
    const pool = connection.pool;
    const poolOptions = (pool.options ?? {}) as pg.ClientConfig & { Client?: typeof pg.Client };
    const { target, secret } = resolveTarget(poolOptions, schema);
    const ClientClass = poolOptions.Client ?? pg.Client;
    return {
      ...common,
      pool,
      ownsPool: false,
      listenClient: () =>
        new ClientClass({
          ...poolOptions,
          connectionTimeoutMillis: poolOptions.connectionTimeoutMillis || connectionTimeoutMs,
          keepAlive: true,
        }),
      target,
      secret,
    };
  }
  if (!('connectionString' in connection))
    throw new InvalidArgumentError('connection', connection, 'must be { connectionString } or { pool }');
  const url = connectionString(connection.connectionString);
  const base: pg.ClientConfig = {
    connectionString: url,
    connectionTimeoutMillis: connectionTimeoutMs,
    keepAlive: true,
    application_name: applicationName,
    ...(idleInTransactionTimeoutMs > 0
      ? { idle_in_transaction_session_timeout: Math.ceil(idleInTransactionTimeoutMs) }
      : {}),
  };
  // Like libpq, fall back to the operating-system user when neither the URL nor PGUSER names one (pg
  // would send no user name at all). The URL wins over config fields in pg, so the user goes into it.
  if (new pg.Client(base).user === undefined) {
    const withUser = new URL(url);
    withUser.username = encodeURIComponent(userInfo().username);
    base.connectionString = withUser.toString();
  }
  const { target, secret } = resolveTarget(base, schema);
  const config: pg.ClientConfig = base;
  const pool = new pg.Pool({ ...config, max: poolSize, idleTimeoutMillis: 10_000 });
  return { ...common, pool, ownsPool: true, listenClient: () => new pg.Client(config), target, secret };
}
