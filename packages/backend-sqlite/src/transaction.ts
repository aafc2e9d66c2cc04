import {
  ConflictError,
  type DeadLetterRecord,
  type DeliveryFailure,
  type DeliveryTransaction,
  type DriverTransaction,
  type Event,
  type Message,
  type Schedule,
  type StoredRecurrence,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection, WriteHold } from './connection.js';
import { mapSqliteError, sqliteCode } from './errors.js';
import {
  type DeadLetterRow,
  type EventRow,
  type ScheduleRow,
  toDeadLetter,
  toEvent,
  toSchedule,
} from './rows.js';
import { prefixUpperBound } from './sql/prefix.js';
import type { Statements } from './statements.js';

/**
 * The operations of one `BEGIN IMMEDIATE … COMMIT` on the writer connection. Every method runs its
 * statements at once inside the transaction; `sql` is the same connection, so the application's own
 * statements join it. Holding SQLite's write lock from the start means nothing can change under it: reads
 * are current, and no check needs repeating at commit.
 */
abstract class SqliteOperations {
  protected readonly connection: SqliteConnection;
  protected readonly statements: Statements;
  protected readonly hold: WriteHold;

  constructor(connection: SqliteConnection, statements: Statements, hold: WriteHold) {
    this.connection = connection;
    this.statements = statements;
    this.hold = hold;
  }

  get sql(): Database.Database {
    return this.connection.writer;
  }

  protected run<T>(operation: string, fn: () => T): T {
    this.connection.checkHold(this.hold, operation);
    try {
      return fn();
    } catch (error) {
      throw mapSqliteError(operation, this.connection.file, error);
    }
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    return this.run('load events', () =>
      (this.statements.get('loadEvents').all(aggregateId) as EventRow[]).map((row) =>
        toEvent(aggregateId, row, this.connection.file),
      ),
    );
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    return this.run('load a schedule', () => {
      const row = this.statements.get('loadSchedule').get(key) as ScheduleRow | undefined;
      return row ? toSchedule(row, this.connection.file) : undefined;
    });
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    this.run('append events', () => {
      const last = (this.statements.get('lastSequence').pluck().get(aggregateId) as number | null) ?? 0;
      if (last !== expectedSequence) throw new ConflictError('aggregate', aggregateId);
      const insert = this.statements.get('insertEvent');
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

  async putSchedule(key: string, at: Date, message: Message, recurrence?: StoredRecurrence): Promise<void> {
    this.run('put a schedule', () => {
      const version = this.statements.get('bumpVersion').pluck().get() as number;
      this.statements.get('putSchedule').run({
        key,
        at: at.getTime(),
        version,
        message: JSON.stringify(message),
        recurrence: recurrence ? JSON.stringify(recurrence) : null,
      });
    });
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    return this.run('load a dead letter', () => {
      const row = this.statements.get('loadDeadLetter').get(key) as DeadLetterRow | undefined;
      return row ? toDeadLetter(row, this.connection.file) : undefined;
    });
  }

  async deleteDeadLetter(key: string): Promise<boolean> {
    return this.run(
      'delete a dead letter',
      () => this.statements.get('deleteDeadLetter').run(key).changes > 0,
    );
  }

  async deleteSchedule(key: string): Promise<boolean> {
    return this.run('cancel a schedule', () => this.statements.get('deleteSchedule').run(key).changes > 0);
  }

  async deletePrefix(prefix: string): Promise<number> {
    return this.run('cancel schedules by prefix', () => {
      const hi = prefixUpperBound(prefix);
      return hi === undefined
        ? this.statements.get('deleteFrom').run({ lo: prefix }).changes
        : this.statements.get('deleteRange').run({ lo: prefix, hi }).changes;
    });
  }
}

/** A plain transaction: the application's `store.transact`. */
export class SqliteTransaction extends SqliteOperations implements DriverTransaction<Database.Database> {
  async commit(): Promise<void> {
    this.connection.commit(this.hold, 'commit a transaction');
  }

  async rollback(): Promise<void> {
    this.connection.rollback(this.hold);
  }
}

const SAVEPOINT = 'duetime_part';

/**
 * A delivery batch: the claim consumed the rows it returns (one `DELETE … RETURNING` on the due index,
 * under the write lock, so no other delivery can take them), each processor's part is a SQLite savepoint,
 * and a schedule put back is inserted again at its version. One fsync for the whole batch at COMMIT.
 */
export class SqliteDelivery extends SqliteOperations implements DeliveryTransaction<Database.Database> {
  readonly claimed: readonly Schedule[];
  #inPart = false;

  constructor(connection: SqliteConnection, statements: Statements, hold: WriteHold, claimed: Schedule[]) {
    super(connection, statements, hold);
    this.claimed = claimed;
  }

  savepoint(_key: string): void {
    this.run('start a delivery part', () => {
      if (this.#inPart) this.connection.writer.exec(`RELEASE ${SAVEPOINT}`);
      this.connection.writer.exec(`SAVEPOINT ${SAVEPOINT}`);
      this.#inPart = true;
    });
  }

  async releaseSavepoint(): Promise<void> {
    if (!this.#inPart) return;
    this.run('end a delivery part', () => this.connection.writer.exec(`RELEASE ${SAVEPOINT}`));
    this.#inPart = false;
  }

  async rollbackToSavepoint(): Promise<void> {
    if (!this.#inPart) return;
    this.run('roll back a delivery part', () =>
      this.connection.writer.exec(`ROLLBACK TO ${SAVEPOINT}; RELEASE ${SAVEPOINT}`),
    );
    this.#inPart = false;
  }

  async restore(schedule: Schedule, failure?: DeliveryFailure): Promise<void> {
    this.run('put back a claimed schedule', () =>
      this.statements.get('restore').run({
        key: schedule.key,
        at: (failure?.at ?? schedule.at).getTime(),
        dueAt: (failure?.dueAt ?? schedule.dueAt).getTime(),
        version: schedule.version,
        attempts: failure?.attempts ?? schedule.attempts,
        message: JSON.stringify(schedule.message),
        error: failure ? failure.error : (schedule.lastError ?? null),
        recurrence: schedule.recurrence ? JSON.stringify(schedule.recurrence) : null,
      }),
    );
  }

  async deadLetter(
    schedule: Schedule,
    record: { attempts: number; error: string; deadAt: Date },
  ): Promise<void> {
    this.run('keep a dead letter', () =>
      this.statements.get('putDeadLetter').run({
        key: schedule.key,
        version: schedule.version,
        at: schedule.at.getTime(),
        message: JSON.stringify(schedule.message),
        attempts: record.attempts,
        error: record.error,
        deadAt: record.deadAt.getTime(),
      }),
    );
  }

  async rearm(schedule: Schedule, at: Date, recurrence: StoredRecurrence): Promise<void> {
    this.run('arm the next occurrence', () => {
      const version = this.statements.get('bumpVersion').pluck().get() as number;
      this.statements.get('rearmSchedule').run({
        key: schedule.key,
        at: at.getTime(),
        version,
        message: JSON.stringify(schedule.message),
        recurrence: JSON.stringify(recurrence),
      });
    });
  }

  async commit(): Promise<ReadonlyMap<string, Error>> {
    this.connection.commit(this.hold, 'commit a delivery batch');
    return new Map();
  }

  async rollback(): Promise<void> {
    this.connection.rollback(this.hold);
  }
}
