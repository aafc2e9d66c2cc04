import {
  type Backend,
  type Clock,
  defineBackend,
  type Logger,
  refuseTransactionControl,
  type WatchEvent,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import { SqliteConnection } from './connection.js';
import { SqliteCursors } from './cursors.js';
import { SqliteLeases } from './leases.js';
import {
  RENAMED_OPTIONS,
  readOptions,
  resolveTarget,
  type SqliteBackendOptions,
  type SqliteTarget,
} from './options.js';
import { prepareSchema } from './schema.js';
import { tables } from './sql/tables.js';
import { prepare } from './statements.js';
import { SqliteStore } from './store.js';
import { ChangeWatcher } from './watch.js';

/** A duetime backend on one SQLite database. */
export interface SqliteBackend extends Backend<Database.Database> {
  /** The database file's absolute path, or `:memory:`. */
  readonly file: string;
  /** The prefix of duetime's tables in it. */
  readonly tablePrefix: string;
  /** The schema version of duetime's tables (after migrations). */
  readonly schemaVersion: number;
}

/**
 * Opens a duetime backend on SQLite: a file it opens itself (`{ filename }`, created when missing, put in
 * WAL mode), or the application's own better-sqlite3 connection (`{ database }`), so the application's
 * tables and duetime's commit in the same transactions.
 *
 * Creates or migrates duetime's tables (every process may do this at once), and refuses a file that is
 * corrupt, belongs to another application, or was written by a newer duetime. With `migrate: false` it
 * creates and changes nothing while opening, and opens only a database that already holds duetime's tables.
 *
 * @example
 * const backend = await createSqliteBackend({ filename: './app.db' });
 * await backend.store.transact(async (tx) => {
 *   tx.sql.prepare('INSERT INTO orders (id, status) VALUES (?, ?)').run('ORD-1', 'pending');
 *   await tx.schedule('order/ORD-1/expire', new Date(Date.now() + 15 * 60_000), {
 *     type: 'order.expire',
 *     aggregateId: 'ORD-1',
 *   });
 * });
 *
 * @throws {InvalidArgumentError} for a bad target or option, naming it.
 * @throws {CorruptDataError} for a file that is not a healthy SQLite database, or holds another
 *   application's tables (when opened by name).
 * @throws {BackendError} when the file cannot be opened, stays locked past `busyTimeoutMs`, or holds a newer
 *   duetime schema (or, with `migrate: false`, an older one).
 * @throws {NotFoundError} with `migrate: false`, when the file or duetime's tables in it do not exist.
 */
export const createSqliteBackend: (
  target: SqliteTarget,
  options?: SqliteBackendOptions,
) => Promise<SqliteBackend> = defineBackend({
  name: 'sqlite',
  factory: 'createSqliteBackend',
  renamed: RENAMED_OPTIONS,
  options: readOptions,
  async open(target: SqliteTarget, { options, clock, logger, onClose }) {
    const where = resolveTarget(target, options.migrate);
    const names = tables(options.tablePrefix);
    const connection = new SqliteConnection(where, options);
    onClose(() => connection.close());
    const schemaVersion = await prepareSchema(connection, names, where.kind, { ...options, logger });
    connection.openReader();
    const store = new SqliteStore(
      connection,
      names,
      { claimTimeoutMs: options.claimTimeoutMs, sql: guardedSql(connection.writer) },
      watchOf(connection, names, options.watchIntervalMs, clock, logger, onClose),
    );
    logger.debug('sqlite backend opened', { file: connection.file, schemaVersion });
    return {
      store,
      leases: new SqliteLeases(connection, names, clock),
      cursors: new SqliteCursors(connection, names, clock),
      capabilities: {
        multiProcess: !connection.memory,
        durable: !connection.memory,
        sql: true,
        // Claims are recorded before a delivery runs, and BEGIN IMMEDIATE holds the write lock while it does.
        exclusiveClaims: true,
      },
      describe: `sqlite backend on ${connection.file}`,
      extra: { file: connection.file, tablePrefix: options.tablePrefix, schemaVersion },
    };
  },
});

/**
 * The push channel: polling `PRAGMA data_version` for other connections' commits (see ChangeWatcher). An
 * in-memory database has no other connection, so its channel is live at once and never reports.
 */
function watchOf(
  connection: SqliteConnection,
  names: ReturnType<typeof tables>,
  interval: number,
  clock: Clock,
  logger: Logger,
  onClose: (step: () => void) => void,
): (listener: (event: WatchEvent) => void) => () => void {
  if (connection.memory)
    return (listener) => {
      queueMicrotask(() => listener({ type: 'live' }));
      return () => {};
    };
  const dataVersion = prepare(connection.writer, 'PRAGMA data_version').pluck();
  const scheduleVersion = prepare(
    connection.reader,
    `SELECT value FROM ${names.meta} WHERE name = 'schedule_version'`,
  ).pluck();
  const watcher = new ChangeWatcher(
    {
      dataVersion: () => dataVersion.get() as number,
      scheduleVersion: () => scheduleVersion.get() as number,
    },
    clock,
    interval,
    logger,
  );
  onClose(() => watcher.stop());
  return (listener) => watcher.watch(listener);
}

/**
 * The writer connection as the application gets it (`tx.sql`): every statement it prepares or executes
 * is first checked for transaction control, which would end duetime's transaction under it.
 */
function guardedSql(db: Database.Database): Database.Database {
  return new Proxy(db, {
    get(target, property) {
      if (property === 'prepare' || property === 'exec')
        return (source: string, ...rest: unknown[]) => {
          refuseTransactionControl(source);
          return (target[property] as (source: string, ...rest: unknown[]) => unknown).call(
            target,
            source,
            ...rest,
          );
        };
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
