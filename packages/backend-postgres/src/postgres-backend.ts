import { type Backend, defineBackend } from '@duetime/core';
import type pg from 'pg';
import { Connection } from './connection.js';
import { describeTarget } from './errors.js';
import type { TransactionRunner } from './hosted.js';
import { PostgresCursors, PostgresLeases } from './leases.js';
import { type MigrationResult, requireCurrentSchema, runMigrations } from './migrate.js';
import { ChangeNotifier, NOTIFY } from './notifications.js';
import {
  type PostgresBackendOptions,
  type PostgresConnection,
  RENAMED_OPTIONS,
  type ResolvedOptions,
  readOptions,
  resolveConnection,
} from './options.js';
import { PostgresStore, type PostgresUnit } from './store.js';

/** The backend's definition, for `createPostgresBackend` and for `migrate` (which keeps what it found). */
function postgres(factory: string) {
  return defineBackend<
    PostgresConnection,
    PostgresBackendOptions,
    ResolvedOptions,
    pg.PoolClient,
    PostgresUnit,
    { migration: MigrationResult }
  >({
    name: 'postgres',
    factory,
    renamed: RENAMED_OPTIONS,
    connectTimeoutMs: 10_000,
    options: readOptions,
    async open(target, ctx) {
      const { options, logger, clock } = ctx;
      const resolved = resolveConnection(target, options, ctx.connectTimeoutMs);
      const { preparedStatements } = options;
      const connection = new Connection({ ...resolved, logger, clock, preparedStatements });
      ctx.onClose(() => connection.close());
      // One round trip, bounded by connectTimeoutMs even on an application pool configured without a
      // connection timeout, so a wrong address or a silent network fails with a clear error.
      await ctx.connect(`PostgreSQL (${describeTarget(resolved.target)})`, () =>
        connection.query('connect', 'SELECT 1'),
      );
      const migration = options.migrate
        ? await runMigrations(connection)
        : await requireCurrentSchema(connection);
      const notifier = new ChangeNotifier({
        schema: options.schema,
        createClient: resolved.listenClient,
        send: (channel, payload) => connection.query('announce schedule change', NOTIFY, [channel, payload]),
        logger,
        clock,
      });
      ctx.onClose(() => notifier.close());
      return {
        store: new PostgresStore(
          connection,
          notifier,
          options.claimTimeoutMs,
          { clock, joinNotifyWithinMs: options.joinNotifyWithinMs },
          options.transactions,
        ),
        leases: new PostgresLeases(connection),
        cursors: new PostgresCursors(connection),
        capabilities: {
          multiProcess: !resolved.embedded,
          durable: true,
          sql: true,
          exclusiveClaims: true,
        },
        describe: `postgres backend (${describeTarget(resolved.target)})`,
        ...(factory === 'migrate' ? { extra: { migration } } : {}),
      };
    },
  });
}

const openPostgres = postgres('createPostgresBackend');
const openMigrator = postgres('migrate');

/**
 * Opens duetime on PostgreSQL: checks the connection, migrates the schema (or, with `migrate: false`,
 * checks that it exists and is current, creating and changing nothing), and returns the {@link Backend}.
 * `tx.sql` inside `store.transact` is the pg client running the transaction, so the application's own
 * statements commit atomically with its schedules; `store.join(client, fn)` works inside a transaction
 * the application began on its own pg client. With `options.transactions`, every duetime transaction is
 * opened by the application's own library instead, and `tx.sql` is that library's transaction.
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
export function createPostgresBackend<Sql>(
  connection: PostgresConnection,
  options: PostgresBackendOptions & { transactions: TransactionRunner<Sql> },
): Promise<Backend<Sql>>;
export function createPostgresBackend(
  connection: PostgresConnection,
  options?: PostgresBackendOptions,
): Promise<Backend<pg.PoolClient>>;
export function createPostgresBackend(
  connection: PostgresConnection,
  options: PostgresBackendOptions = {},
): Promise<Backend<unknown>> {
  return openPostgres(connection, options) as Promise<Backend<unknown>>;
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
  const backend = await openMigrator(connection, { ...options, poolSize: 1, migrate: true });
  await backend.close();
  return backend.migration;
}
