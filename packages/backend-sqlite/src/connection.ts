import { realpathSync } from 'node:fs';
import { BackendError, ClosedError, retry, systemClock } from '@duetime/core';
import Database from 'better-sqlite3';
import { isBusy, mapSqliteError } from './errors.js';
import { gateFor, type TransactionGate } from './gate.js';
import type { ResolvedOptions } from './options.js';

/** This instance's hold on the gate, from `BEGIN IMMEDIATE` to `COMMIT`/`ROLLBACK`. */
export interface WriteHold {
  open: boolean;
  release(): void;
}

type Target = { kind: 'filename'; filename: string } | { kind: 'database'; database: Database.Database };

/**
 * The connections of one backend instance and the rules for using them:
 * - `writer` runs every transaction, between `BEGIN IMMEDIATE` and `COMMIT`, under the file's gate; it is
 *   the application's connection when given `{ database }`.
 * - `reader`, a second connection opened for file databases, answers reads outside transactions, so they
 *   see only committed data and never wait for a transaction. An in-memory database has no second
 *   connection: its reads take the gate instead.
 */
export class SqliteConnection {
  /** The file's absolute path, or `:memory:`. Named in every error. */
  readonly file: string;
  readonly writer: Database.Database;
  readonly memory: boolean;
  readonly ownsWriter: boolean;
  #reader: Database.Database | undefined;
  readonly #gate: TransactionGate;
  readonly #unrefGate: () => void;
  readonly #options: ResolvedOptions;
  readonly #begin: Database.Statement;
  readonly #commit: Database.Statement;
  readonly #rollback: Database.Statement;
  #hold: WriteHold | undefined;
  #closed = false;

  constructor(target: Target, options: ResolvedOptions) {
    this.#options = options;
    if (target.kind === 'filename') {
      try {
        // timeout 0: lock waits happen asynchronously in beginWrite, never inside a synchronous call.
        // fileMustExist with migrate: false: opening must not create a file.
        this.writer = new Database(target.filename, { timeout: 0, fileMustExist: !options.migrate });
      } catch (error) {
        throw mapSqliteError('open', target.filename, error);
      }
      this.ownsWriter = true;
    } else {
      this.writer = target.database;
      this.ownsWriter = false;
    }
    let path = '';
    try {
      const main = (this.writer.pragma('database_list') as { name: string; file: string }[]).find(
        (d) => d.name === 'main',
      );
      path = main?.file ?? '';
    } catch (error) {
      const name = target.kind === 'filename' ? target.filename : target.database.name;
      if (this.ownsWriter) this.writer.close();
      throw mapSqliteError('open', name, error);
    }
    this.memory = path === '';
    this.file = this.memory ? ':memory:' : path;
    const { gate, unref } = gateFor(this.memory ? this.writer : realpath(path));
    this.#gate = gate;
    this.#unrefGate = unref;
    this.#begin = this.writer.prepare('BEGIN IMMEDIATE');
    this.#commit = this.writer.prepare('COMMIT');
    this.#rollback = this.writer.prepare('ROLLBACK');
  }

  /** Opens the read connection (file databases only), once the schema exists. */
  openReader(): void {
    if (this.memory || this.#reader) return;
    try {
      const reader = new Database(this.file, { fileMustExist: true, timeout: this.#options.busyTimeoutMs });
      reader.pragma('query_only = 1');
      // SQLite's own default page cache (2 MB) rather than better-sqlite3's 16 MB: the reader serves
      // listings, counts and single loads outside transactions, which the OS page cache serves as well,
      // and a status page paging through large messages would otherwise keep 16 MB of them resident.
      reader.pragma('cache_size = -2000');
      this.#reader = reader;
    } catch (error) {
      throw mapSqliteError('open a read connection', this.file, error);
    }
  }

  /** The connection for reads outside transactions (the writer for an in-memory database). */
  get reader(): Database.Database {
    return this.#reader ?? this.writer;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Whether one of duetime's own transactions is open on the writer. */
  get holding(): boolean {
    return this.#hold !== undefined;
  }

  /** Throws when the backend was closed, or the application closed the connection it lent. */
  check(operation: string): void {
    if (this.#closed) throw new ClosedError(`sqlite backend on ${this.file}`);
    if (!this.writer.open)
      throw new BackendError(
        `${operation} (${this.file})`,
        'the application closed the better-sqlite3 connection it passed as { database }',
      );
  }

  /**
   * Takes the gate, then SQLite's write lock with `BEGIN IMMEDIATE`. While another process holds the lock,
   * retries every few ms without blocking the event loop, for up to `busyTimeoutMs`.
   */
  async beginWrite(operation: string): Promise<WriteHold> {
    this.check(operation);
    const release = await this.#gate.acquire();
    const hold: WriteHold = { open: true, release };
    if (this.#closed) {
      release();
      throw new ClosedError(`sqlite backend on ${this.file}`);
    }
    this.#hold = hold;
    try {
      await this.#beginImmediate(operation);
    } catch (error) {
      this.#finish(hold);
      throw error;
    }
    return hold;
  }

  async #beginImmediate(operation: string): Promise<void> {
    await this.retryWhileBusy(operation, () => {
      if (this.writer.inTransaction)
        throw new BackendError(
          `${operation} (${this.file})`,
          'a transaction is already open on this connection outside duetime; write through store.transact (tx.sql) instead',
        );
      this.#tryBegin();
    });
  }

  /**
   * Runs `attempt` until it stops failing with SQLITE_BUSY, sleeping a few ms in between (the event loop
   * keeps running), for up to `busyTimeoutMs`; then fails with a transient BackendError.
   *
   * The wait is measured on the system clock, not the injected one: the lock is held by another process,
   * which releases it in real time, and a test's ManualClock would never move on by itself.
   */
  retryWhileBusy<T>(operation: string, attempt: () => T): Promise<T> {
    const busyTimeoutMs = this.#options.busyTimeoutMs;
    return retry(
      () => {
        this.check(operation);
        try {
          return attempt();
        } catch (error) {
          throw isBusy(error) ? error : mapSqliteError(operation, this.file, error);
        }
      },
      {
        clock: systemClock,
        deadlineMs: busyTimeoutMs,
        retryIf: isBusy,
        delayMs: () => 1 + Math.floor(Math.random() * 3),
        onGiveUp: (error, waited) =>
          new BackendError(
            `${operation} (${this.file})`,
            `the database stayed locked by another connection for ${Math.round(waited)} ms (busyTimeoutMs ${busyTimeoutMs})`,
            { transient: true, cause: error },
          ),
      },
    );
  }

  #tryBegin(): void {
    if (this.ownsWriter) {
      this.#begin.run();
      return;
    }
    // The application's connection may have a busy timeout, which would block the event loop: lift it
    // for the attempt only.
    const saved = Number(this.writer.pragma('busy_timeout', { simple: true }));
    if (saved === 0) {
      this.#begin.run();
      return;
    }
    this.writer.pragma('busy_timeout = 0');
    try {
      this.#begin.run();
    } finally {
      this.writer.pragma(`busy_timeout = ${saved}`);
    }
  }

  /** Throws unless `hold` is this connection's open transaction (not closed under it, not ended by tx.sql). */
  checkHold(hold: WriteHold, operation: string): void {
    if (!hold.open || this.#closed)
      throw new ClosedError(`transaction on ${this.file} (the backend was closed)`);
    if (!this.writer.inTransaction)
      throw new BackendError(
        `${operation} (${this.file})`,
        'the transaction was ended by a COMMIT or ROLLBACK run through tx.sql; duetime cannot keep it atomic',
      );
  }

  commit(hold: WriteHold, operation = 'commit'): void {
    try {
      this.checkHold(hold, operation);
      this.#commit.run();
    } catch (error) {
      this.#rollbackQuietly();
      throw mapSqliteError(operation, this.file, error);
    } finally {
      this.#finish(hold);
    }
  }

  rollback(hold: WriteHold): void {
    if (!hold.open) return;
    try {
      this.#rollbackQuietly();
    } finally {
      this.#finish(hold);
    }
  }

  /** Runs `fn` inside the open transaction `hold`, mapping SQLite's errors. */
  within<T>(hold: WriteHold, operation: string, fn: () => T): T {
    this.checkHold(hold, operation);
    try {
      return fn();
    } catch (error) {
      throw mapSqliteError(operation, this.file, error);
    }
  }

  /** Runs `fn` in its own short write transaction. */
  async write<T>(operation: string, fn: (db: Database.Database) => T): Promise<T> {
    const hold = await this.beginWrite(operation);
    let result: T;
    try {
      result = fn(this.writer);
    } catch (error) {
      this.rollback(hold);
      throw mapSqliteError(operation, this.file, error);
    }
    this.commit(hold, operation);
    return result;
  }

  /** Runs `fn` against committed data, outside any transaction. */
  async read<T>(operation: string, fn: (db: Database.Database) => T): Promise<T> {
    this.check(operation);
    if (this.#reader) {
      try {
        return fn(this.#reader);
      } catch (error) {
        throw mapSqliteError(operation, this.file, error);
      }
    }
    const release = await this.#gate.acquire();
    try {
      this.check(operation);
      return fn(this.writer);
    } catch (error) {
      throw mapSqliteError(operation, this.file, error);
    } finally {
      release();
    }
  }

  #rollbackQuietly(): void {
    try {
      if (this.writer.open && this.writer.inTransaction) this.#rollback.run();
    } catch {
      // The connection is gone or the transaction already ended: nothing to undo.
    }
  }

  #finish(hold: WriteHold): void {
    hold.open = false;
    if (this.#hold === hold) this.#hold = undefined;
    hold.release();
  }

  /**
   * Closes what this instance opened. A transaction still open is rolled back (nothing half-done is kept);
   * its later commit fails with a ClosedError. The application's connection stays open.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const hold = this.#hold;
    if (hold) {
      this.#rollbackQuietly();
      this.#finish(hold);
    }
    try {
      this.#reader?.close();
      if (this.ownsWriter && this.writer.open) this.writer.close();
    } finally {
      this.#unrefGate();
    }
  }
}

function realpath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}
