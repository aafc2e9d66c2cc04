import {
  type Backend,
  BackendError,
  BackendLifecycle,
  createStore,
  guardCursors,
  guardLeases,
} from '@duetime/core';
import type pg from 'pg';
import {
  type PostgresBackendOptions,
  type PostgresConnection,
  type ResolvedConfig,
  resolveConfig,
} from './config.js';
import { Connection } from './connection.js';
import { PostgresCursors } from './cursors.js';
import { describeTarget } from './errors.js';
import { PostgresLeases } from './leases.js';
import { type MigrationResult, requireCurrentSchema, runMigrations } from './migrate.js';
import { ChangeNotifier, NOTIFY } from './notifications.js';
import { PostgresStoreDriver } from './store.js';

/**
 * Opens duetime on PostgreSQL: checks the connection, migrates the schema (or, with `migrate: false`,
 * checks that it exists and is current, creating and changing nothing), and returns the {@link Backend}. `tx.sql` inside `store.transact` is the
 * pg client running the transaction, so the application's own statements commit atomically with its
 * schedules.
 *
 * Fails fast, never hangs: a bad URL or option throws an InvalidArgumentError at once; an unreachable
 * server, wrong credentials, a missing database or a schema the user may not use reject with a
 * BackendError naming what was tried (host, port, database, schema, user; never the password) within
 * `connectTimeoutMs`; a schema migrated by a newer release rejects with a NotSupportedError; with
 * `migrate: false`, a schema or tables that do not exist reject with a NotFoundError.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString: process.env.DATABASE_URL! });
 * await backend.store.transact(async (tx) => {
 *   await tx.sql.query('UPDATE orders SET status = $1 WHERE id = $2', ['placed', orderId]);
 *   await tx.schedule(`order/${orderId}/expire`, new Date(Date.now() + 3_600_000), {
 *     type: 'order.expire',
 *     aggregateId: orderId,
 *   });
 * });
 */
export async function createPostgresBackend(
  connection: PostgresConnection,
  options: PostgresBackendOptions = {},
): Promise<Backend<pg.PoolClient>> {
  const config = resolveConfig(connection, options);
  const conn = openConnection(config);
  try {
    await firstContact(conn, config.connectTimeoutMs);
    if (config.migrate) await runMigrations(conn);
    else await requireCurrentSchema(conn);
  } catch (error) {
    await conn.close().catch(() => {});
    throw error;
  }
  const notifier = new ChangeNotifier({
    schema: config.schema,
    createClient: config.listenClient,
    send: (channel, payload) =>
      conn.query('announce schedule change', conn.prepared('notify', NOTIFY), [channel, payload]),
    logger: config.logger,
    clock: config.clock,
  });
  const store = createStore(new PostgresStoreDriver(conn, notifier), {
    clock: config.clock,
    logger: config.logger,
  });
  const lifecycle = new BackendLifecycle('postgres backend');
  return {
    name: 'postgres',
    store,
    leases: guardLeases(new PostgresLeases(conn), lifecycle),
    cursors: guardCursors(new PostgresCursors(conn), lifecycle),
    capabilities: { multiProcess: true, durable: true, sql: true, exclusiveClaims: true },
    close: () =>
      lifecycle.close(async () => {
        await store.close();
        await conn.close();
      }),
  };
}

/**
 * Brings the schema to this package's version and returns the versions before and after. For teams that
 * run migrations as a deployment step (then open backends with `migrate: false`). Safe to run from
 * several processes at once; a schema already current is left untouched.
 */
export async function migrate(
  connection: PostgresConnection,
  options: Pick<
    PostgresBackendOptions,
    'schema' | 'logger' | 'connectTimeoutMs' | 'connectionTimeoutMs' | 'applicationName'
  > = {},
): Promise<MigrationResult> {
  const config = resolveConfig(connection, { ...options, poolSize: 1 });
  const conn = openConnection(config);
  try {
    await firstContact(conn, config.connectTimeoutMs);
    return await runMigrations(conn);
  } finally {
    await conn.close();
  }
}

function openConnection(config: ResolvedConfig): Connection {
  return new Connection({
    pool: config.pool,
    ownsPool: config.ownsPool,
    target: config.target,
    secret: config.secret,
    logger: config.logger,
    clock: config.clock,
    preparedStatements: config.preparedStatements,
  });
}

/**
 * One round trip, bounded by `timeoutMs` even on an application pool configured without a connection
 * timeout, so a wrong address or a silent network fails with a clear error instead of hanging.
 */
async function firstContact(conn: Connection, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new BackendError(
            'connect',
            `no answer within ${timeoutMs} ms (tried ${describeTarget(conn.target)})`,
            { transient: true },
          ),
        ),
      timeoutMs,
    );
  });
  try {
    const contact = conn.query('connect', 'SELECT 1');
    contact.catch(() => {}); // when the timeout wins, a later failure has nobody to tell
    await Promise.race([contact, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
