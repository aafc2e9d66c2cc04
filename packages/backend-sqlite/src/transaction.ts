import {
  ConflictError,
  type DriverTransaction,
  type Event,
  type Message,
  type Schedule,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection, WriteHold } from './connection.js';
import { mapSqliteError, sqliteCode } from './errors.js';
import { type EventRow, type ScheduleRow, toEvent, toSchedule } from './rows.js';
import { prefixUpperBound } from './sql/prefix.js';
import type { Statements } from './statements.js';

/**
 * One `BEGIN IMMEDIATE … COMMIT` on the writer connection. Every method runs its statements at once inside
 * the transaction; `sql` is the same connection, so the application's own statements join it.
 *
 * Holding SQLite's write lock from the start means nothing can change under this transaction: reads are
 * current, and `consume` checks key and version directly (no optimistic re-check at commit).
 */
export class SqliteTransaction implements DriverTransaction<Database.Database> {
  readonly #connection: SqliteConnection;
  readonly #statements: Statements;
  readonly #hold: WriteHold;

  constructor(connection: SqliteConnection, statements: Statements, hold: WriteHold) {
    this.#connection = connection;
    this.#statements = statements;
    this.#hold = hold;
  }

  get sql(): Database.Database {
    return this.#connection.writer;
  }

  #run<T>(operation: string, fn: () => T): T {
    this.#connection.checkHold(this.#hold, operation);
    try {
      return fn();
    } catch (error) {
      throw mapSqliteError(operation, this.#connection.file, error);
    }
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    return this.#run('load events', () =>
      (this.#statements.get('loadEvents').all(aggregateId) as EventRow[]).map((row) =>
        toEvent(aggregateId, row, this.#connection.file),
      ),
    );
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    return this.#run('load a schedule', () => {
      const row = this.#statements.get('loadSchedule').get(key) as ScheduleRow | undefined;
      return row ? toSchedule(row, this.#connection.file) : undefined;
    });
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    this.#run('append events', () => {
      const last = (this.#statements.get('lastSequence').pluck().get(aggregateId) as number | null) ?? 0;
      if (last !== expectedSequence) throw new ConflictError('aggregate', aggregateId);
      const insert = this.#statements.get('insertEvent');
      try {
        for (const e of events)
          insert.run(
            aggregateId,
            e.sequence,
            e.type,
            e.data === undefined ? null : JSON.stringify(e.data),
            e.timestamp,
          );
      } catch (error) {
        if (sqliteCode(error)?.startsWith('SQLITE_CONSTRAINT'))
          throw new ConflictError('aggregate', aggregateId, undefined, { cause: error });
        throw error;
      }
    });
  }

  async putSchedule(key: string, at: Date, message: Message): Promise<void> {
    this.#run('put a schedule', () => {
      const version = this.#statements.get('bumpVersion').pluck().get() as number;
      this.#statements
        .get('putSchedule')
        .run({ key, at: at.getTime(), version, message: JSON.stringify(message) });
    });
  }

  async deleteSchedule(key: string): Promise<boolean> {
    return this.#run('cancel a schedule', () => this.#statements.get('deleteSchedule').run(key).changes > 0);
  }

  async deletePrefix(prefix: string): Promise<number> {
    return this.#run('cancel schedules by prefix', () => {
      const hi = prefixUpperBound(prefix);
      return hi === undefined
        ? this.#statements.get('deleteFrom').run({ lo: prefix }).changes
        : this.#statements.get('deleteRange').run({ lo: prefix, hi }).changes;
    });
  }

  async consume(key: string, version: number): Promise<boolean> {
    return this.#run(
      'consume a schedule',
      () => this.#statements.get('consume').run(key, version).changes === 1,
    );
  }

  async commit(): Promise<void> {
    this.#connection.commit(this.#hold, 'commit a transaction');
  }

  async rollback(): Promise<void> {
    this.#connection.rollback(this.#hold);
  }
}
