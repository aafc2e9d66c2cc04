import {
  type Clock,
  createBufferedDelivery,
  type DeadLetterRecord,
  type DeliveryTransaction,
  type DriverDeadLetterQuery,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  type Logger,
  type Schedule,
  type StoreDriver,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';
import {
  type DeadLetterRow,
  type EventRow,
  type ScheduleRow,
  toDeadLetter,
  toEvent,
  toSchedule,
} from './rows.js';
import { prefixUpperBound } from './sql/prefix.js';
import type { Tables } from './sql/tables.js';
import { prepare, Statements } from './statements.js';
import { SqliteDelivery, SqliteTransaction } from './transaction.js';
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

  /**
   * Claims and consumes up to `limit` due schedules in one `DELETE … RETURNING` under the write lock. A
   * look on the read connection first keeps an idle dispatcher from taking the write lock at all.
   */
  async deliver(now: Date, limit: number): Promise<DeliveryTransaction<Database.Database>> {
    const at = now.getTime();
    const due = await this.#connection.read('look for due schedules', () => this.#read.get('anyDue').get(at));
    if (due === undefined) return this.#nothingDue();
    const hold = await this.#connection.beginWrite('claim due schedules');
    let claimed: Schedule[];
    try {
      claimed = this.#connection.within(hold, 'claim due schedules', () =>
        (this.#write.get('claimDue').all(at, limit) as ScheduleRow[])
          .map((row) => toSchedule(row, this.#connection.file))
          .sort(compareDue),
      );
    } catch (error) {
      this.#connection.rollback(hold);
      throw error;
    }
    return new SqliteDelivery(this.#connection, this.#write, hold, claimed);
  }

  #nothingDue(): DeliveryTransaction<Database.Database> {
    return createBufferedDelivery({
      claimed: [],
      reads: this,
      commit: async () => {},
      sql: this.#connection.writer,
    });
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
      const prefix = prefixRange(query.prefix, params);
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

  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    return this.#connection.read('load a dead letter', () => {
      const row = this.#read.get('loadDeadLetter').get(key) as DeadLetterRow | undefined;
      return row ? toDeadLetter(row, this.#connection.file) : undefined;
    });
  }

  listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    return this.#connection.read('list dead letters', () => {
      const params: Record<string, unknown> = { limit: query.limit };
      const prefix = prefixRange(query.prefix, params);
      if (query.after !== undefined) params.after = query.after;
      const statement = this.#read.deadLetterList({ prefix, after: query.after !== undefined });
      return (statement.all(params) as DeadLetterRow[]).map((row) =>
        toDeadLetter(row, this.#connection.file),
      );
    });
  }

  nextDueAt(): Promise<Date | undefined> {
    return this.#connection.read('find the next due time', () => {
      const dueAt = this.#read.get('nextDueAt').pluck().get() as number | undefined;
      return dueAt === undefined ? undefined : new Date(dueAt);
    });
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

function compareDue(a: Schedule, b: Schedule): number {
  return a.dueAt.getTime() - b.dueAt.getTime() || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}

/**
 * How a literal key prefix is searched: as the index range [prefix, upper bound) when there is one, else
 * from the prefix on with a `substr` check (a prefix of only U+10FFFF characters). Sets `lo`/`hi` in `params`.
 */
function prefixRange(prefix: string | undefined, params: Record<string, unknown>): 'none' | 'range' | 'from' {
  if (prefix === undefined || prefix === '') return 'none';
  params.lo = prefix;
  const hi = prefixUpperBound(prefix);
  if (hi === undefined) return 'from';
  params.hi = hi;
  return 'range';
}
