import {
  type Backend,
  BackendError,
  defineBackend,
  durationOption,
  InvalidArgumentError,
  readFactoryOptions,
} from '@duetime/core';
import type pg from 'pg';
import { Connection } from './connection.js';
import { describeTarget } from './errors.js';
import { PostgresCursors, PostgresLeases } from './leases.js';
import { type MigrationResult, requireCurrentSchema, runMigrations } from './migrate.js';
import { ChangeNotifier, NOTIFY } from './notifications.js';
import {
  type PostgresBackendOptions,
  type PostgresConnection,
  RENAMED_OPTIONS,
  type ResolvedConnection,
  type ResolvedOptions,
  readOptions,
  resolveConnection,
  schemaProblem,
} from './options.js';
import { PostgresStore, type PostgresUnit } from './store.js';

function openConnection(
  resolved: ResolvedConnection,
  options: Pick<ConstructorParameters<typeof Connection>[0], 'logger' | 'clock' | 'preparedStatements'>,
): Connection {
  return new Connection({ ...resolved, ...options });
}

const openPostgres = defineBackend<
  PostgresConnection,
  PostgresBackendOptions,
  ResolvedOptions,
  pg.PoolClient,
  PostgresUnit
>({
  name: 'postgres',
  factory: 'createPostgresBackend',
  renamed: RENAMED_OPTIONS,
  connectTimeoutMs: 10_000,
  options: readOptions,
  async open(target, ctx) {
    const { options, logger, clock } = ctx;
    const resolved = resolveConnection(target, options, ctx.connectTimeoutMs);
    const connection = openConnection(resolved, {
      logger,
      clock,
      preparedStatements: options.preparedStatements,
    });
    ctx.onClose(() => connection.close());
    // One round trip, bounded by connectTimeoutMs even on an application pool configured without a
    // connection timeout, so a wrong address or a silent network fails with a clear error.
    await ctx.connect(`PostgreSQL (${describeTarget(resolved.target)})`, () =>
      connection.query('connect', 'SELECT 1'),
    );
    if (options.migrate) await runMigrations(connection);
    else await requireCurrentSchema(connection);
    const notifier = new ChangeNotifier({
      schema: options.schema,
      createClient: resolved.listenClient,
      send: (channel, payload) => connection.query('announce schedule change', NOTIFY, [channel, payload]),
      logger,
      clock,
    });
    ctx.onClose(() => notifier.close());
    return {
      store: new PostgresStore(connection, notifier, options.claimTimeoutMs),
      leases: new PostgresLeases(connection),
      cursors: new PostgresCursors(connection),
      capabilities: { multiProcess: true, durable: true, sql: true, exclusiveClaims: true },
      describe: `postgres backend (${describeTarget(resolved.target)})`,
    };
  },
});

/**
 * Opens duetime on PostgreSQL: checks the connection, migrates the schema (or, with `migrate: false`,
 * checks that it exists and is current, creating and changing nothing), and returns the {@link Backend}.
 * `tx.sql` inside `store.transact` is the pg client running the transaction, so the application's own
 * statements commit atomically with its schedules; `store.join(client, fn)` works inside a transaction
 * the application began on its own pg client.
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
export function createPostgresBackend(
  connection: PostgresConnection,
  options: PostgresBackendOptions = {},
): Promise<Backend<pg.PoolClient>> {
  return openPostgres(connection, options);
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
  const {
    options: given,
    logger,
    clock,
  } = readFactoryOptions(options, {
    factory: 'migrate',
    renamed: RENAMED_OPTIONS,
  });
  const schema = given.schema ?? 'duetime';
  const problem = typeof schema === 'string' ? schemaProblem(schema) : 'must be a string';
  if (problem) throw new InvalidArgumentError('options.schema', schema, problem);
  const connectTimeoutMs = durationOption('options.connectTimeoutMs', given.connectTimeoutMs, 10_000);
  const resolved = resolveConnection(
    connection,
    {
      schema,
      poolSize: 1,
      applicationName: given.applicationName ?? 'duetime',
      idleInTransactionTimeoutMs: 0,
    },
    connectTimeoutMs,
  );
  const conn = openConnection(resolved, { logger, clock, preparedStatements: false });
  try {
    await firstContact(conn, connectTimeoutMs);
    return await runMigrations(conn);
  } finally {
    await conn.close();
  }
}

/** One round trip, bounded by `timeoutMs` whatever the pool's own connection timeout. */
async function firstContact(conn: Connection, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new BackendError(
            'connect',
            `no answer within ${timeoutMs} ms (tried ${describeTarget(conn.target)})`,
            {
              transient: true,
            },
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
