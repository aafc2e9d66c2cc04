import { existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  type Clock,
  InvalidArgumentError,
  type Logger,
  NotFoundError,
  type OptionReader,
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
   * running. It is measured in real time, not on `clock`: another process releases the lock in real time.
   */
  busyTimeoutMs?: number;
  /** @deprecated Renamed to {@link busyTimeoutMs}; the old name is removed in the next minor version. */
  busyTimeout?: number;
  /** Prefix of duetime's table names (default `duetime_`): letters, digits and `_`, at most 32 characters. */
  tablePrefix?: string;
  /**
   * How often the backend looks for commits made by other connections while someone watches for changes
   * (a dispatcher does), in ms of `clock` time (default 50). The check is one `PRAGMA data_version`.
   */
  watchIntervalMs?: number;
  /** @deprecated Renamed to {@link watchIntervalMs}; the old name is removed in the next minor version. */
  watchInterval?: number;
  /**
   * How long a delivery's claim outlives a process that died holding it, in ms of real time (default
   * 10,000). A delivery records its claims before it opens its transaction; when its process dies, the
   * claimed schedules are claimed again once this has passed, and the crash counts as a failed attempt of
   * each of them. A live delivery removes its claims when it ends, however long it runs.
   */
  claimTimeoutMs?: number;
  /**
   * `full` (default): a commit survives a power loss. `normal`: faster; a process crash still loses
   * nothing, a power loss may lose the last commits. Applies only to connections the backend opens.
   */
  synchronous?: 'full' | 'normal';
  /**
   * Create or migrate duetime's tables when opening (default true). With `false` the backend opens only a
   * database that already holds duetime's tables at this package's schema version, and changes nothing
   * while opening (no file, no table, no journal mode): a file or tables that are not there are a
   * `NotFoundError`, an older schema a `BackendError`. For tools that only inspect, such as
   * `duetime schedules list`.
   */
  migrate?: boolean;
}

/** Options renamed to the `…Ms` convention: the old names work, with a warning, until the next minor. */
export const RENAMED_OPTIONS = { busyTimeout: 'busyTimeoutMs', watchInterval: 'watchIntervalMs' } as const;

export interface ResolvedOptions {
  busyTimeoutMs: number;
  tablePrefix: string;
  watchIntervalMs: number;
  claimTimeoutMs: number;
  synchronous: 'full' | 'normal';
  migrate: boolean;
}

const PREFIX = /^[A-Za-z_][A-Za-z0-9_]{0,31}$/;

/** Checks the target; returns the file name to open or the application's connection. */
export function resolveTarget(
  target: SqliteTarget,
  migrate = true,
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
  if (filename === ':memory:') {
    if (!migrate)
      throw new NotFoundError('sqlite database :memory:', 'a new :memory: database holds no duetime tables');
    return { kind: 'filename', filename };
  }
  if (filename.startsWith('file:'))
    throw new InvalidArgumentError('filename', filename, 'must be a path, not a file: URI');
  const path = resolve(filename);
  const dir = dirname(path);
  if (!existsSync(dir))
    throw new InvalidArgumentError('filename', filename, `its directory ${dir} does not exist`);
  if (existsSync(path) && statSync(path).isDirectory())
    throw new InvalidArgumentError('filename', filename, 'is a directory');
  if (!migrate && !existsSync(path))
    throw new NotFoundError(
      `sqlite database ${path}`,
      `no duetime database at ${path}: the file does not exist`,
    );
  return { kind: 'filename', filename: path };
}

/** Reads the backend's own options (core reads `clock`, `logger` and the renamed ones). */
export function readOptions(read: OptionReader): ResolvedOptions {
  return {
    tablePrefix: read.string('tablePrefix', 'duetime_', (value) =>
      PREFIX.test(value)
        ? undefined
        : 'must start with a letter or _ and hold only letters, digits and _ (at most 32 characters)',
    ),
    synchronous: read.oneOf('synchronous', ['full', 'normal'], 'full'),
    busyTimeoutMs: read.duration('busyTimeoutMs', 5000, { allowZero: true }),
    watchIntervalMs: read.duration('watchIntervalMs', 50, { max: 60_000 }),
    claimTimeoutMs: read.duration('claimTimeoutMs', 10_000),
    migrate: read.boolean('migrate', true),
  };
}
