import { userInfo } from 'node:os';
import {
  type Clock,
  InvalidArgumentError,
  type Logger,
  type OptionReader,
  parseBackendUrl,
  redactUrl,
} from '@duetime/core';
import pg from 'pg';
import type { ConnectionTarget } from './errors.js';
import { readRunner, type TransactionRunner } from './hosted.js';
import { isPGlite, type PGliteLike, PgliteListenClient, PglitePool } from './pglite.js';

/**
 * Where the backend's connections come from: a URL (the backend creates, owns and closes a pool), the
 * application's own `pg.Pool` (shared, so `tx.sql` runs on the application's connections; never closed
 * by duetime), or a PGlite database in the application's process (`@electric-sql/pglite`: one session,
 * so one transaction at a time and one process; never closed by duetime).
 */
export type PostgresConnection = { connectionString: string } | { pool: pg.Pool } | { pglite: PGliteLike };

/** The options of `createPostgresBackend`; README.md describes each. */
export interface PostgresBackendOptions {
  /** The schema of duetime's tables (default `duetime`), created by the migrations when missing. */
  schema?: string;
  /** Stamps events and drives the dispatcher (default: the system clock). Leases use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** Run pending migrations when opening (default true); false only checks that the schema is current. */
  migrate?: boolean;
  /** Connections in the pool created from a URL (default 10). */
  poolSize?: number;
  /** Connection timeout of the pool created from a URL, the LISTEN connection and the first contact (10 s). */
  connectTimeoutMs?: number;
  /** @deprecated Renamed to {@link connectTimeoutMs}; the old name is removed in the next minor version. */
  connectionTimeoutMs?: number;
  /** `application_name` of the connections duetime opens (default `duetime`). */
  applicationName?: string;
  /** Named prepared statements, planned once per connection (default true; off behind old PgBouncers). */
  preparedStatements?: boolean;
  /** `idle_in_transaction_session_timeout` of the connections created from a URL (default 60 s; 0: off). */
  idleInTransactionTimeoutMs?: number;
  /** How long a delivery's claim lasts unrenewed (default 30 s): a dead process's claims lapse after it. */
  claimTimeoutMs?: number;
  /**
   * `store.join` tells other processes of a schedule only when it falls due within this many ms (default
   * 30,000, the Dispatcher's default `watchedRescanInterval`): a dispatcher whose push channel is live
   * looks at the store at least that often, so it finds later schedules in time without a notification.
   * The notification is sent inside the application's transaction, and PostgreSQL serialises the commits
   * of notifying transactions; leaving it out where it adds nothing keeps concurrent commits concurrent.
   * Set it to your dispatchers' `watchedRescanInterval` if you raised that.
   */
  joinNotifyWithinMs?: number;
  /**
   * Opens every duetime transaction (each delivery batch, each `store.transact`) through your own library
   * instead of duetime's pool: `(fn) => db.transaction((tx) => fn(executor, tx))`. Processors then get
   * your library's transaction as `tx.sql`, typed (a Drizzle or Kysely transaction, a postgres.js `sql`, a
   * Prisma transaction client, …), and their writes commit with the consumption. `@duetime/bindings` has
   * a runner per library. Default: duetime's own transactions on its pool, `tx.sql` a pg client.
   */
  transactions?: TransactionRunner<unknown>;
  /**
   * Connections of the pool created from a URL pipeline their statements (node-postgres's
   * `pipeline: true`, tested with pg 8.23; default false): statements sent without waiting go out together
   * instead of one round trip each. With the Dispatcher's `pipeline` option a delivery batch's processors
   * then run at once and their statements share round trips. For your own pool, create it with
   * `pipeline: true` instead.
   */
  pipeline?: boolean;
}

/** Options renamed to one spelling across backends: the old names work, with a warning, until the next minor. */
export const RENAMED_OPTIONS = { connectionTimeoutMs: 'connectTimeoutMs' } as const;

/** The backend's own options, checked. */
export type ResolvedOptions = ReturnType<typeof readOptions>;

/** What a connection resolved to: the pool, whether it is ours, the LISTEN client, what it points at. */
export interface ResolvedConnection {
  pool: pg.Pool;
  ownsPool: boolean;
  listenClient: () => pg.Client;
  /** On PGlite: one session in this process, so no other process shares the store. */
  embedded: boolean;
  target: ConnectionTarget;
  secret: string | undefined;
}

const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why a schema name is refused: a plain identifier of at most 63 bytes, not a reserved `pg_` name. */
function schemaProblem(value: string): string | undefined {
  if (!SCHEMA_NAME.test(value))
    return 'must be a plain identifier (letters, digits, _; not starting with a digit)';
  if (Buffer.byteLength(value) > 63) return 'must be at most 63 bytes';
  if (value.toLowerCase().startsWith('pg_')) return 'must not start with pg_ (reserved by PostgreSQL)';
  return undefined;
}

function applicationNameProblem(value: string): string | undefined {
  return value.length > 63 || /[^\x20-\x7e]/.test(value)
    ? 'must be printable ASCII, at most 63 characters'
    : undefined;
}

/** Reads the options of `createPostgresBackend` (`connectTimeoutMs` is core's). */
export function readOptions(read: OptionReader) {
  return {
    schema: read.string('schema', 'duetime', schemaProblem),
    migrate: read.boolean('migrate', true),
    poolSize: read.integer('poolSize', 10),
    applicationName: read.string('applicationName', 'duetime', applicationNameProblem),
    preparedStatements: read.boolean('preparedStatements', true),
    idleInTransactionTimeoutMs: read.duration('idleInTransactionTimeoutMs', 60_000, { allowZero: true }),
    claimTimeoutMs: read.duration('claimTimeoutMs', 30_000),
    joinNotifyWithinMs: read.duration('joinNotifyWithinMs', 30_000, { allowZero: true }),
    transactions: readRunner(read.value('transactions')),
    pipeline: read.boolean('pipeline', false),
  };
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
  const pool = value as Record<string, unknown> | null;
  return ['connect', 'query', 'on'].every((method) => typeof pool?.[method] === 'function');
}

/** Reads what a pg config resolves to (defaults and PG* environment variables included), without connecting. */
function resolveTarget(
  config: pg.ClientConfig,
  schema: string,
): { target: ConnectionTarget; secret: string | undefined } {
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
    secret: typeof password === 'string' && password.length > 0 ? password : undefined,
  };
}

/** Checks `connection` and creates the pool if it is ours. */
export function resolveConnection(
  connection: PostgresConnection,
  options: Pick<
    ResolvedOptions,
    'schema' | 'poolSize' | 'applicationName' | 'idleInTransactionTimeoutMs' | 'pipeline'
  >,
  connectTimeoutMs: number,
): ResolvedConnection {
  if (typeof connection !== 'object' || connection === null)
    throw new InvalidArgumentError(
      'connection',
      connection,
      'must be { connectionString }, { pool } or { pglite }',
    );
  if ('pglite' in connection) {
    const db = connection.pglite;
    if (!isPGlite(db))
      throw new InvalidArgumentError(
        'connection.pglite',
        db,
        'must be a PGlite database (await PGlite.create()), not one of its transactions',
      );
    if (options.pipeline)
      throw new InvalidArgumentError('options.pipeline', true, 'does not apply to PGlite (one session)');
    return {
      pool: new PglitePool(db) as unknown as pg.Pool,
      ownsPool: false,
      listenClient: () => new PgliteListenClient(db) as unknown as pg.Client,
      embedded: true,
      target: {
        host: 'pglite',
        port: 0,
        database: db.dataDir ?? 'memory://',
        user: 'postgres',
        schema: options.schema,
      },
      secret: undefined,
    };
  }
  if ('pool' in connection) {
    if (!isPool(connection.pool))
      throw new InvalidArgumentError('connection.pool', connection.pool, 'must be a pg.Pool');
    const pool = connection.pool;
    if (options.pipeline && (pool.options as { pipeline?: unknown }).pipeline !== true)
      throw new InvalidArgumentError(
        'options.pipeline',
        true,
        'applies to the pool duetime creates from a URL; create your pool with new pg.Pool({ ..., pipeline: true })',
      );
    const poolOptions = (pool.options ?? {}) as pg.ClientConfig & { Client?: typeof pg.Client };
    const ClientClass = poolOptions.Client ?? pg.Client;
    return {
      pool,
      ownsPool: false,
      embedded: false,
      listenClient: () =>
        new ClientClass({
          ...poolOptions,
          connectionTimeoutMillis: poolOptions.connectionTimeoutMillis || connectTimeoutMs,
          keepAlive: true,
        }),
      ...resolveTarget(poolOptions, options.schema),
    };
  }
  if (!('connectionString' in connection))
    throw new InvalidArgumentError(
      'connection',
      connection,
      'must be { connectionString }, { pool } or { pglite }',
    );
  const url = connectionString(connection.connectionString);
  const config: pg.ClientConfig = {
    connectionString: url,
    connectionTimeoutMillis: connectTimeoutMs,
    keepAlive: true,
    application_name: options.applicationName,
    ...(options.idleInTransactionTimeoutMs > 0
      ? { idle_in_transaction_session_timeout: Math.ceil(options.idleInTransactionTimeoutMs) }
      : {}),
  };
  // Like libpq, fall back to the operating-system user when neither the URL nor PGUSER names one (pg
  // would send no user name at all). The URL wins over config fields in pg, so the user goes into it.
  if (new pg.Client(config).user === undefined) {
    const withUser = new URL(url);
    withUser.username = encodeURIComponent(userInfo().username);
    config.connectionString = withUser.toString();
  }
  const pool = new pg.Pool({
    ...config,
    max: options.poolSize,
    idleTimeoutMillis: 10_000,
    ...(options.pipeline ? { pipeline: true } : {}),
  });
  return {
    pool,
    ownsPool: true,
    embedded: false,
    listenClient: () => new pg.Client(config),
    ...resolveTarget(config, options.schema),
  };
}
