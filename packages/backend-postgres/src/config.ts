import { userInfo } from 'node:os';
import {
  booleanOption,
  type Clock,
  durationOption,
  InvalidArgumentError,
  type Logger,
  parseBackendUrl,
  positiveInteger,
  readFactoryOptions,
  redactUrl,
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
   * Run pending migrations when opening (default true). With false, opening creates and changes nothing:
   * it checks that the schema is at this package's version, and fails with a `NotFoundError` when the
   * schema or duetime's tables in it do not exist, or a `BackendError` when they are older. For teams that
   * run {@link migrate} separately, and for tools that only inspect (`duetime schedules list`).
   */
  migrate?: boolean;
  /** Connections in the pool the backend creates from a URL (default 10). Ignored with `pool`. */
  poolSize?: number;
  /**
   * How long to wait for a connection before failing (default 10,000 ms): applied to the pool created
   * from a URL and the LISTEN connection, and to the first contact when opening, whatever the pool.
   */
  connectTimeoutMs?: number;
  /** @deprecated Renamed to {@link connectTimeoutMs}; the old name is removed in the next minor version. */
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

/** Options renamed to one spelling across backends: the old names work, with a warning, until the next minor. */
export const RENAMED_OPTIONS = { connectionTimeoutMs: 'connectTimeoutMs' } as const;

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
  connectTimeoutMs: number;
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

function connectionString(value: unknown): string {
  const field = 'connection.connectionString';
  // pg reads every query parameter itself (sslmode, application_name, …): they are left to it.
  parseBackendUrl(value, {
    field,
    schemes: ['postgres:', 'postgresql:'],
    example: 'postgres://user:password@host:5432/database',
    host: false,
    params: 'any',
  });
  const url = new URL(value as string);
  if (!url.hostname && !url.searchParams.get('host'))
    throw new InvalidArgumentError(
      field,
      redactUrl(value as string),
      'names no host (postgres://host:5432/database)',
    );
  // pg reads the URL with its own parser, which refuses some URLs that WHATWG accepts (an IPv6 host in a
  // URL that also holds a space or a stray '%', for one): ask it now, so the error is typed and names the field.
  try {
    new pg.Client({ connectionString: value as string });
  } catch (error) {
    throw new InvalidArgumentError(
      field,
      redactUrl(value as string),
      `cannot be read by pg (${error instanceof Error ? error.message : String(error)}); percent-encode spaces and '%' in it`,
    );
  }
  return value as string;
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
  given: PostgresBackendOptions = {},
): ResolvedConfig {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError('connection', connection, 'must be { connectionString } or { pool }');
  const { options, clock, logger } = readFactoryOptions(given, {
    factory: 'createPostgresBackend',
    renamed: RENAMED_OPTIONS,
  });
  const schema = schemaName(options.schema ?? 'duetime');
  const connectTimeoutMs = durationOption('options.connectTimeoutMs', options.connectTimeoutMs, 10_000);
  const poolSize = positiveInteger('options.poolSize', options.poolSize ?? 10);
  const idleInTransactionTimeoutMs = durationOption(
    'options.idleInTransactionTimeoutMs',
    options.idleInTransactionTimeoutMs,
    60_000,
    { allowZero: true },
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
  const common = {
    schema,
    clock,
    logger,
    migrate: booleanOption('options.migrate', options.migrate, true),
    connectTimeoutMs,
    preparedStatements: booleanOption('options.preparedStatements', options.preparedStatements, true),
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
          connectionTimeoutMillis: poolOptions.connectionTimeoutMillis || connectTimeoutMs,
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
    connectionTimeoutMillis: connectTimeoutMs,
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
