import {
  type Backend,
  type BackendCapabilities,
  BackendLifecycle,
  createStore,
  guardCursors,
  guardLeases,
  type Store,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import { SqliteConnection } from './connection.js';
import { SqliteCursors } from './cursors.js';
import { SqliteLeases } from './leases.js';
import { resolveOptions, resolveTarget, type SqliteBackendOptions, type SqliteTarget } from './options.js';
import { prepareSchema } from './schema.js';
import { tables } from './sql/tables.js';
import { SqliteStoreDriver } from './store.js';

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
export async function createSqliteBackend(
  target: SqliteTarget,
  options: SqliteBackendOptions = {},
): Promise<SqliteBackend> {
  const resolved = resolveOptions(options);
  const where = resolveTarget(target, resolved.migrate);
  const names = tables(resolved.tablePrefix);
  const connection = new SqliteConnection(where, resolved);
  let schemaVersion: number;
  try {
    schemaVersion = await prepareSchema(connection, names, where.kind, resolved);
    connection.openReader();
  } catch (error) {
    connection.close();
    throw error;
  }
  const driver = new SqliteStoreDriver(
    connection,
    names,
    { clock: resolved.clock, interval: resolved.watchIntervalMs, logger: resolved.logger },
    () => connection.close(),
  );
  const store: Store<Database.Database> = createStore(driver, {
    clock: resolved.clock,
    logger: resolved.logger,
  });
  const capabilities: BackendCapabilities = {
    multiProcess: !connection.memory,
    durable: !connection.memory,
    sql: true,
    // BEGIN IMMEDIATE holds the write lock from the start: no two processors for one file run at once.
    exclusiveClaims: true,
  };
  resolved.logger.debug('sqlite backend opened', { file: connection.file, schemaVersion });
  const lifecycle = new BackendLifecycle(`sqlite backend on ${connection.file}`);
  return {
    name: 'sqlite',
    file: connection.file,
    tablePrefix: resolved.tablePrefix,
    schemaVersion,
    store,
    leases: guardLeases(new SqliteLeases(connection, names, resolved.clock), lifecycle),
    cursors: guardCursors(new SqliteCursors(connection, names, resolved.clock), lifecycle),
    capabilities,
    close: () => lifecycle.close(() => store.close()),
  };
}
