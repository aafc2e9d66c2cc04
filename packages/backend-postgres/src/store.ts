import {
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  InvalidArgumentError,
  type Schedule,
  type StoreDriver,
} from '@duetime/core';
import type pg from 'pg';
import type { Connection, Statement } from './connection.js';
import type { ChangeNotifier } from './notifications.js';
import { toEvent, toSchedule } from './rows.js';
import { type EventRow, eventSql } from './sql/events.js';
import { quoteIdent } from './sql/ident.js';
import { type ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';
import { PostgresTransaction, type Statements } from './transaction.js';

/**
 * The {@link StoreDriver} on PostgreSQL. Reads outside transactions run on the pool (retried when a
 * pooled connection turns out to be dead); transactions are interactive ({@link PostgresTransaction}).
 *
 * Isolation is READ COMMITTED (PostgreSQL's default), made safe by row locks and constraints instead of
 * snapshots: a put is an upsert holding the key's row lock; consume locks the row with
 * `FOR UPDATE SKIP LOCKED` and checks the version; an append relies on the primary key (aggregate_id,
 * sequence), so a concurrent append surfaces as a unique violation = `ConflictError('aggregate')`.
 * Serialization failures and deadlocks surface as `ConflictError('serialization')`; core re-runs.
 */
export class PostgresStoreDriver implements StoreDriver<pg.PoolClient> {
  readonly #connection: Connection;
  readonly #notifier: ChangeNotifier;
  readonly #sql: Statements;
  readonly #loadEvents: Statement;
  readonly #loadSchedule: Statement;
  readonly #due: Statement;
  readonly #nextDue: Statement;
  readonly #recordFailure: Statement;

  constructor(connection: Connection, notifier: ChangeNotifier) {
    this.#connection = connection;
    this.#notifier = notifier;
    const s = quoteIdent(connection.target.schema);
    this.#sql = { schedules: scheduleSql(s), events: eventSql(s) };
    this.#loadEvents = connection.prepared('load_events', this.#sql.events.load('$1'));
    this.#loadSchedule = connection.prepared('load_schedule', this.#sql.schedules.load('$1'));
    this.#due = connection.prepared('due', this.#sql.schedules.due);
    this.#nextDue = connection.prepared('next_due', this.#sql.schedules.nextDue);
    this.#recordFailure = connection.prepared('record_failure', this.#sql.schedules.recordFailure);
  }

  async begin(): Promise<DriverTransaction<pg.PoolClient>> {
    const out = await this.#connection.checkout('begin transaction');
    return new PostgresTransaction(this.#connection, out, this.#sql, this.#notifier);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const result = await this.#connection.idempotent<EventRow>('load events', this.#loadEvents, [
      aggregateId,
    ]);
    return result.rows.map((row) => toEvent(aggregateId, row));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const result = await this.#connection.idempotent<ScheduleRow>('load schedule', this.#loadSchedule, [key]);
    const row = result.rows[0];
    return row ? toSchedule(row) : undefined;
  }

  async listSchedules(query: DriverScheduleQuery): Promise<Schedule[]> {
    const { through, prefix, after, limit } = query;
    // Nothing can be due before the earliest instant PostgreSQL stores.
    if (through && through.getTime() < PG_MIN_TIME) return [];
    const values: unknown[] = [];
    if (through) values.push(pgTimestamp(through));
    if (prefix !== undefined) values.push(prefix);
    if (after) values.push(pgTimestamp(new Date(Math.max(after.at, PG_MIN_TIME))), after.key);
    values.push(limit);
    const text = this.#sql.schedules.list({
      through: through !== undefined,
      prefix: prefix !== undefined,
      after: after !== undefined,
    });
    const result = await this.#connection.idempotent<ScheduleRow>('list schedules', text, values);
    return result.rows.map(toSchedule);
  }

  async dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    if (now.getTime() < PG_MIN_TIME) return [];
    const result = await this.#connection.idempotent<ScheduleRow>('find due schedules', this.#due, [
      pgTimestamp(now),
      limit,
    ]);
    return result.rows.map(toSchedule);
  }

  async nextDueAt(): Promise<Date | undefined> {
    const result = await this.#connection.idempotent<{ due_ms: number }>('find next due time', this.#nextDue);
    const row = result.rows[0];
    return row ? new Date(row.due_ms) : undefined;
  }

  async recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean> {
    if (failure.dueAt.getTime() < PG_MIN_TIME)
      throw new InvalidArgumentError('failure.dueAt', failure.dueAt, 'is earlier than PostgreSQL can store');
    const result = await this.#connection.idempotent('record failed delivery', this.#recordFailure, [
      key,
      version,
      failure.attempts,
      pgTimestamp(failure.dueAt),
      failure.error.replaceAll('\u0000', ''),
    ]);
    return result.rowCount === 1;
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#notifier.watch(onChange);
  }

  async close(): Promise<void> {
    await this.#notifier.close();
  }
}
