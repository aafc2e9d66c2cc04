import type {
  Clock,
  DriverScheduleQuery,
  DriverTransaction,
  Event,
  Logger,
  Schedule,
  StoreDriver,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';
import { type EventRow, type ScheduleRow, toEvent, toSchedule } from './rows.js';
import { prefixUpperBound } from './sql/prefix.js';
import type { Tables } from './sql/tables.js';
import { prepare, Statements } from './statements.js';
import { SqliteTransaction } from './transaction.js';
import { ChangeWatcher } from './watch.js';

/** How the driver looks for other connections' commits (file databases only). */
export interface WatchSettings {
  clock: Clock;
  interval: number;
  logger: Logger;
}

/**
 * The store driver on SQLite. Transactions run on the writer connection under the file's gate; reads
 * outside transactions use the read connection and see committed data only.
 */
export class SqliteStoreDriver implements StoreDriver<Database.Database> {
  readonly #connection: SqliteConnection;
  readonly #write: Statements;
  readonly #read: Statements;
  readonly #watcher: ChangeWatcher | undefined;
  readonly #onClose: () => void;

  constructor(connection: SqliteConnection, tables: Tables, watch: WatchSettings, onClose: () => void) {
    this.#connection = connection;
    this.#write = new Statements(connection.writer, tables);
    this.#read =
      connection.reader === connection.writer ? this.#write : new Statements(connection.reader, tables);
    this.#onClose = onClose;
    // An in-memory database has no other connection whose commits could be missed.
    if (!connection.memory) {
      const dataVersion = prepare(connection.writer, 'PRAGMA data_version').pluck();
      const scheduleVersion = this.#read.get('readVersion');
      this.#watcher = new ChangeWatcher(
        {
          dataVersion: () => dataVersion.get() as number,
          scheduleVersion: () => scheduleVersion.pluck().get() as number,
        },
        watch.clock,
        watch.interval,
        watch.logger,
      );
    }
  }

  async begin(): Promise<DriverTransaction<Database.Database>> {
    const hold = await this.#connection.beginWrite('begin a transaction');
    return new SqliteTransaction(this.#connection, this.#write, hold);
  }

  loadEvents(aggregateId: string): Promise<Event[]> {
    return this.#connection.read('load events', () =>
      (this.#read.get('loadEvents').all(aggregateId) as EventRow[]).map((row) =>
        toEvent(aggregateId, row, this.#connection.file),
      ),
    );
  }

  loadSchedule(key: string): Promise<Schedule | undefined> {
    return this.#connection.read('load a schedule', () => {
      const row = this.#read.get('loadSchedule').get(key) as ScheduleRow | undefined;
      return row ? toSchedule(row, this.#connection.file) : undefined;
    });
  }

  listSchedules(query: DriverScheduleQuery): Promise<Schedule[]> {
    return this.#connection.read('list schedules', () => {
      const params: Record<string, unknown> = { limit: query.limit };
      let prefix: 'none' | 'range' | 'from' = 'none';
      if (query.prefix !== undefined && query.prefix !== '') {
        params.lo = query.prefix;
        const hi = prefixUpperBound(query.prefix);
        if (hi === undefined) prefix = 'from';
        else {
          prefix = 'range';
          params.hi = hi;
        }
      }
      if (query.through !== undefined) params.through = query.through.getTime();
      if (query.after !== undefined) {
        params.afterAt = query.after.at;
        params.afterKey = query.after.key;
      }
      const statement = this.#read.list({
        through: query.through !== undefined,
        prefix,
        after: query.after !== undefined,
      });
      return (statement.all(params) as ScheduleRow[]).map((row) => toSchedule(row, this.#connection.file));
    });
  }

  dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    return this.#connection.read('fetch due schedules', () =>
      (this.#read.get('dueSchedules').all(now.getTime(), limit) as ScheduleRow[]).map((row) =>
        toSchedule(row, this.#connection.file),
      ),
    );
  }

  nextDueAt(): Promise<Date | undefined> {
    return this.#connection.read('find the next due time', () => {
      const dueAt = this.#read.get('nextDueAt').pluck().get() as number | undefined;
      return dueAt === undefined ? undefined : new Date(dueAt);
    });
  }

  recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean> {
    return this.#connection.write(
      'record a failed delivery',
      () =>
        this.#write.get('recordFailure').run({
          key,
          version,
          attempts: failure.attempts,
          dueAt: failure.dueAt.getTime(),
          error: failure.error,
        }).changes === 1,
    );
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#watcher ? this.#watcher.watch(onChange) : () => {};
  }

  /** Whether the change watcher has a poll timer armed (for tests of close()). */
  get polling(): boolean {
    return this.#watcher?.polling ?? false;
  }

  async close(): Promise<void> {
    this.#watcher?.stop();
    this.#onClose();
  }
}
