import {
  createBufferedDelivery,
  type DeadLetterRecord,
  type DeliveryTransaction,
  type DriverDeadLetterQuery,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  type Schedule,
  type StoreDriver,
} from '@duetime/core';
import type pg from 'pg';
import { type CheckedOutClient, type Connection, RAW_TYPES, type Statement } from './connection.js';
import { isConnectionLost } from './errors.js';
import type { ChangeNotifier } from './notifications.js';
import { toDeadLetter, toEvent, toSchedule } from './rows.js';
import { type DeadLetterRow, deadLetterSql } from './sql/dead-letters.js';
import { type EventRow, eventSql } from './sql/events.js';
import { literal, quoteIdent } from './sql/ident.js';
import { type ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';
import { BEGIN, last, PostgresDelivery, PostgresTransaction, type Statements } from './transaction.js';

/**
 * The {@link StoreDriver} on PostgreSQL. Reads outside transactions run on the pool (retried when a
 * pooled connection turns out to be dead); transactions are interactive ({@link PostgresTransaction}).
 *
 * Isolation is READ COMMITTED (PostgreSQL's default), made safe by row locks and constraints instead of
 * snapshots: a put is an upsert holding the key's row lock; a delivery's claim locks its rows with
 * `FOR UPDATE SKIP LOCKED` and deletes them in the same statement; an append relies on the primary key
 * (aggregate_id, sequence), so a concurrent append surfaces as a unique violation =
 * `ConflictError('aggregate')`.
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
  readonly #loadDeadLetter: Statement;

  constructor(connection: Connection, notifier: ChangeNotifier) {
    this.#connection = connection;
    this.#notifier = notifier;
    const s = quoteIdent(connection.target.schema);
    this.#sql = { schedules: scheduleSql(s), events: eventSql(s), deadLetters: deadLetterSql(s) };
    this.#loadEvents = connection.prepared('load_events', this.#sql.events.load('$1'));
    this.#loadSchedule = connection.prepared('load_schedule', this.#sql.schedules.load('$1'));
    this.#due = connection.prepared('due', this.#sql.schedules.due);
    this.#nextDue = connection.prepared('next_due', this.#sql.schedules.nextDue);
    this.#loadDeadLetter = connection.prepared('load_dead_letter', this.#sql.deadLetters.load('$1'));
  }

  async begin(): Promise<DriverTransaction<pg.PoolClient>> {
    const out = await this.#connection.checkout('begin transaction');
    return new PostgresTransaction(this.#connection, out, this.#sql, this.#notifier);
  }

  /**
   * Claims and consumes a page of due schedules in one statement (see `claim` in sql/schedules.ts), sent
   * with the BEGIN in one round trip, on a connection of its own. With nothing due, the transaction ends
   * at once (its ROLLBACK goes out without being waited for) and an empty delivery is returned, holding
   * no connection.
   */
  async deliver(now: Date, limit: number): Promise<DeliveryTransaction<pg.PoolClient>> {
    // Nothing can be due before the earliest instant PostgreSQL stores, nor before what the last
    // next-due lookup found while nothing changed since (see QuietWindow).
    if (now.getTime() < PG_MIN_TIME || this.#notifier.quiet.quiet(now.getTime()))
      return this.#nothingDue(Promise.resolve());
    const operation = 'claim due schedules';
    const text = `${BEGIN}; ${this.#sql.schedules.claim(literal(pgTimestamp(now)), literal(limit))}`;
    let out = await this.#connection.checkout(operation);
    let rows: ScheduleRow[];
    try {
      rows = await this.#claim(out, text);
    } catch (error) {
      // A pooled connection that had died (a restarted or failed-over server): nothing reached the
      // server, so the claim starts over once on a fresh one.
      if (!isConnectionLost(error) || this.#connection.closed) {
        await out.rollback();
        throw this.#connection.error(error, operation);
      }
      out.release(true);
      out = await this.#connection.checkout(operation);
      try {
        rows = await this.#claim(out, text);
      } catch (again) {
        await out.rollback();
        throw this.#connection.error(again, operation);
      }
    }
    if (rows.length === 0) return this.#nothingDue(out.rollback());
    let claimed: Schedule[];
    try {
      claimed = rows.map(toSchedule);
    } catch (error) {
      await out.rollback();
      throw error;
    }
    return new PostgresDelivery(this.#connection, out, this.#sql, this.#notifier, claimed);
  }

  async #claim(out: CheckedOutClient, text: string): Promise<ScheduleRow[]> {
    this.#connection.check();
    const result = last(
      (await out.client.query({ text, types: RAW_TYPES })) as unknown as pg.QueryResult<ScheduleRow>[],
    );
    return result.rows;
  }

  /** A delivery that claimed nothing; `ended` is the end of the transaction that looked. */
  #nothingDue(ended: Promise<void>): DeliveryTransaction<pg.PoolClient> {
    return createBufferedDelivery<pg.PoolClient>({
      claimed: [],
      reads: this,
      commit: async () => {},
      rollback: () => ended,
    });
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

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    const result = await this.#connection.idempotent<DeadLetterRow>(
      'load dead letter',
      this.#loadDeadLetter,
      [key],
    );
    const row = result.rows[0];
    return row ? toDeadLetter(row) : undefined;
  }

  async listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    const { prefix, after, limit } = query;
    const values: unknown[] = [];
    if (prefix !== undefined) values.push(prefix);
    if (after !== undefined) values.push(after);
    values.push(limit);
    const text = this.#sql.deadLetters.list({ prefix: prefix !== undefined, after: after !== undefined });
    const result = await this.#connection.idempotent<DeadLetterRow>('list dead letters', text, values);
    return result.rows.map(toDeadLetter);
  }

  async nextDueAt(): Promise<Date | undefined> {
    const record = this.#notifier.quiet.look();
    const result = await this.#connection.idempotent<{ due_ms: number }>('find next due time', this.#nextDue);
    const row = result.rows[0];
    record(row?.due_ms);
    return row ? new Date(row.due_ms) : undefined;
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#notifier.watch(onChange);
  }

  async close(): Promise<void> {
    await this.#notifier.close();
  }
}
