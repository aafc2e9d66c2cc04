import { existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  type Clock,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  silentLogger,
  systemClock,
} from '@duetime/core';
import type Database from 'better-sqlite3';

/** Where the data lives: a file the backend opens, or a connection the application already has. */
export type SqliteTarget =
  | {
      /** Path of the database file (created when missing), or `:memory:` for a private in-memory database. */
      filename: string;
    }
  | {
      /**
       * The application's own better-sqlite3 connection. duetime's tables are created next to the
       * application's, `tx.sql` is this connection, and `close()` leaves it open.
       */
      database: Database.Database;
    };

export interface SqliteBackendOptions {
  /** Stamps events and judges leases and cursors (default: the system clock). Tests pass a `ManualClock`. */
  clock?: Clock;
  logger?: Logger;
  /**
   * How long a transaction waits for another process to release the database's write lock before it fails
   * with a transient `BackendError`, in ms (default 5,000). The wait is asynchronous: the event loop keeps
   * running.
   */
  busyTimeout?: number;
  /** Prefix of duetime's table names (default `duetime_`): letters, digits and `_`, at most 32 characters. */
  tablePrefix?: string;
  /**
   * How often the backend looks for commits made by other connections while someone watches for changes
   * (a dispatcher does), in ms of `clock` time (default 50). The check is one `PRAGMA data_version`.
   */
  watchInterval?: number;
  /**
   * `full` (default): a commit survives a power loss. `normal`: faster; a process crash still loses
   * nothing, a power loss may lose the last commits. Applies only to connections the backend opens.
   */
  synchronous?: 'full' | 'normal';
}

export interface ResolvedOptions {
  clock: Clock;
  logger: Logger;
  busyTimeout: number;
  tablePrefix: string;
  watchInterval: number;
  synchronous: 'full' | 'normal';
}

const PREFIX = /^[A-Za-z_][A-Za-z0-9_]{0,31}$/;

/** Checks the target; returns the file name to open or the application's connection. */
export function resolveTarget(
  target: SqliteTarget,
): { kind: 'filename'; filename: string } | { kind: 'database'; database: Database.Database } {
  if (typeof target !== 'object' || target === null)
    throw new InvalidArgumentError('target', target, 'must be { filename } or { database }');
  const hasFile = 'filename' in target && target.filename !== undefined;
  const hasDatabase = 'database' in target && target.database !== undefined;
  if (hasFile === hasDatabase)
    throw new InvalidArgumentError('target', target, 'must have exactly one of `filename` or `database`');
  if (hasDatabase) {
    const database = (target as { database: Database.Database }).database;
    if (typeof database?.prepare !== 'function' || typeof database.pragma !== 'function')
      throw new InvalidArgumentError('database', database, 'must be a better-sqlite3 Database');
    if (!database.open) throw new InvalidArgumentError('database', database.name, 'is closed');
    if (database.readonly) throw new InvalidArgumentError('database', database.name, 'is opened read-only');
    return { kind: 'database', database };
  }
  const filename = (target as { filename: unknown }).filename;
  if (typeof filename !== 'string' || filename.trim() === '')
    throw new InvalidArgumentError('filename', filename, 'must be a file path or ":memory:"');
  if (filename.includes('\u0000'))
    throw new InvalidArgumentError('filename', filename, 'contains a NUL character');
  if (filename === ':memory:') return { kind: 'filename', filename };
  if (filename.startsWith('file:'))
    throw new InvalidArgumentError('filename', filename, 'must be a path, not a file: URI');
  const path = resolve(filename);
  const dir = dirname(path);
  if (!existsSync(dir))
    throw new InvalidArgumentError('filename', filename, `its directory ${dir} does not exist`);
  if (existsSync(path) && statSync(path).isDirectory())
    throw new InvalidArgumentError('filename', filename, 'is a directory');
  return { kind: 'filename', filename: path };
}

/** Checks the options and fills in the defaults. */
export function resolveOptions(options: SqliteBackendOptions | undefined): ResolvedOptions {
  if (options !== undefined && (typeof options !== 'object' || options === null))
    throw new InvalidArgumentError('options', options, 'must be an object');
  const o = options ?? {};
  const clock = o.clock ?? systemClock;
  if (typeof clock?.now !== 'function' || typeof clock.setTimer !== 'function')
    throw new InvalidArgumentError('options.clock', clock, 'must be a Clock { now(), setTimer() }');
  const logger = o.logger ?? silentLogger;
  for (const level of ['debug', 'info', 'warn', 'error'] as const)
    if (typeof logger?.[level] !== 'function')
      throw new InvalidArgumentError('options.logger', logger, `must be a Logger (no ${level} method)`);
  const tablePrefix = o.tablePrefix ?? 'duetime_';
  if (typeof tablePrefix !== 'string' || !PREFIX.test(tablePrefix))
    throw new InvalidArgumentError(
      'options.tablePrefix',
      tablePrefix,
      'must start with a letter or _ and hold only letters, digits and _ (at most 32 characters)',
    );
  const synchronous = o.synchronous ?? 'full';
  if (synchronous !== 'full' && synchronous !== 'normal')
    throw new InvalidArgumentError('options.synchronous', synchronous, 'must be "full" or "normal"');
  return {
    clock,
    logger,
    busyTimeout: duration('options.busyTimeout', o.busyTimeout ?? 5000, {
      allowZero: true,
      max: MAX_TIMER_MS,
    }),
    tablePrefix,
    watchInterval: duration('options.watchInterval', o.watchInterval ?? 50, { max: 60_000 }),
    synchronous,
  };
}
