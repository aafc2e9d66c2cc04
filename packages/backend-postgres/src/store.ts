import {
  BackendError,
  ConflictError,
  CorruptDataError,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  InvalidArgumentError,
  type Message,
  type Schedule,
  type StoreDriver,
} from '@duetime/core';
import type pg from 'pg';
import type { CheckedOutClient, Connection } from './connection.js';
import { sqlState } from './errors.js';
import type { ChangeNotifier } from './notifications.js';
import { type EventRow, eventSql } from './sql/events.js';
import { quoteIdent } from './sql/ident.js';
import { notifyAndCommit, type ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';

type Statements = { schedules: ReturnType<typeof scheduleSql>; events: ReturnType<typeof eventSql> };

/**
 * The {@link StoreDriver} on PostgreSQL. Transactions are interactive: `begin()` checks a client out of
 * the pool and runs BEGIN; every call runs at once on that client, and `tx.sql` is that same client, so
 * the application's own statements commit or roll back with the schedules.
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

  constructor(connection: Connection, notifier: ChangeNotifier) {
    this.#connection = connection;
    this.#notifier = notifier;
    const s = quoteIdent(connection.target.schema);
    this.#sql = { schedules: scheduleSql(s), events: eventSql(s) };
  }

  async begin(): Promise<DriverTransaction<pg.PoolClient>> {
    const out = await this.#connection.checkout('begin transaction');
    return new PostgresTransaction(this.#connection, out, this.#sql, this.#notifier);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const result = await this.#connection.idempotent<EventRow>('load events', this.#sql.events.load, [
      aggregateId,
    ]);
    return result.rows.map((row) => toEvent(aggregateId, row));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const result = await this.#connection.idempotent<ScheduleRow>('load schedule', this.#sql.schedules.load, [
      key,
    ]);
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
    const result = await this.#connection.idempotent<ScheduleRow>(
      'find due schedules',
      this.#sql.schedules.due,
      [pgTimestamp(now), limit],
    );
    return result.rows.map(toSchedule);
  }

  async nextDueAt(): Promise<Date | undefined> {
    const result = await this.#connection.idempotent<{ due_ms: number }>(
      'find next due time',
      this.#sql.schedules.nextDue,
    );
    const row = result.rows[0];
    return row ? new Date(row.due_ms) : undefined;
  }

  async recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean> {
    const result = await this.#connection.idempotent(
      'record failed delivery',
      this.#sql.schedules.recordFailure,
      [key, version, failure.attempts, timestampParam('failure.dueAt', failure.dueAt), failure.error],
    );
    return result.rowCount === 1;
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#notifier.watch(onChange);
  }

  async close(): Promise<void> {
    await this.#notifier.close();
  }
}

/** One interactive transaction on a checked-out client. */
class PostgresTransaction implements DriverTransaction<pg.PoolClient> {
  readonly #connection: Connection;
  readonly #out: CheckedOutClient;
  readonly #sql: Statements;
  readonly #notifier: ChangeNotifier;
  #put = false;
  #earliest: number | undefined;
  #finished = false;

  constructor(connection: Connection, out: CheckedOutClient, sql: Statements, notifier: ChangeNotifier) {
    this.#connection = connection;
    this.#out = out;
    this.#sql = sql;
    this.#notifier = notifier;
  }

  get sql(): pg.PoolClient {
    return this.#out.client;
  }

  #run<R extends Record<string, unknown>>(operation: string, text: string, values: unknown[]) {
    return this.#connection.query<R>(operation, text, values, this.#out.client);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const result = await this.#run<EventRow>('load events', this.#sql.events.load, [aggregateId]);
    return result.rows.map((row) => toEvent(aggregateId, row));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const result = await this.#run<ScheduleRow>('load schedule', this.#sql.schedules.load, [key]);
    const row = result.rows[0];
    return row ? toSchedule(row) : undefined;
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    if (events.length === 0) return;
    const batch = events.map((e, i) => ({
      sequence: expectedSequence + i + 1,
      type: e.type,
      ...(e.data !== undefined ? { data: e.data } : {}),
      at: timestampParam('event.timestamp', new Date(e.timestamp)),
    }));
    try {
      await this.#out.client.query(this.#sql.events.append, [aggregateId, JSON.stringify(batch)]);
    } catch (error) {
      if (sqlState(error) === '23505' && (error as pg.DatabaseError).constraint === 'events_pkey')
        throw new ConflictError('aggregate', aggregateId, undefined, { cause: error });
      throw this.#connection.error(error, 'append events');
    }
  }

  async putSchedule(key: string, at: Date, message: Message): Promise<void> {
    await this.#run('put schedule', this.#sql.schedules.put, [
      key,
      timestampParam('at', at),
      JSON.stringify(message),
    ]);
    this.#put = true;
    const t = at.getTime();
    if (this.#earliest === undefined || t < this.#earliest) this.#earliest = t;
  }

  async deleteSchedule(key: string): Promise<boolean> {
    const result = await this.#run('cancel schedule', this.#sql.schedules.delete, [key]);
    return (result.rowCount ?? 0) > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const result = await this.#run('cancel schedules by prefix', this.#sql.schedules.deletePrefix, [prefix]);
    return result.rowCount ?? 0;
  }

  async consume(key: string, version: number): Promise<boolean> {
    const result = await this.#run('consume schedule', this.#sql.schedules.consume, [key, version]);
    return result.rowCount === 1;
  }

  async commit(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    try {
      if (this.#put) {
        // One round trip: the notification is queued in the transaction and delivered only on commit.
        const { channel, payload } = this.#notifier.notification(this.#earliest);
        await this.#out.client.query(notifyAndCommit(channel, payload));
      } else {
        const result = await this.#out.client.query('COMMIT');
        // PostgreSQL answers COMMIT of a transaction already aborted by an error (one the application
        // caught and swallowed) with ROLLBACK, not with an error.
        if (result.command === 'ROLLBACK')
          throw new BackendError(
            'commit',
            'the transaction had failed on an earlier statement (an error caught inside it) and was rolled back',
          );
      }
    } catch (error) {
      // Whether a COMMIT that lost its connection took effect is unknown: report it, never retry it.
      await this.#out.rollback();
      throw this.#connection.error(error, 'commit');
    }
    this.#out.release(false);
  }

  async rollback(): Promise<void> {
    this.#finished = true;
    await this.#out.rollback();
  }
}

/** A Date as a timestamptz parameter; refuses instants before what PostgreSQL can store. */
function timestampParam(field: string, date: Date): string {
  if (date.getTime() < PG_MIN_TIME)
    throw new InvalidArgumentError(field, date, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
  return pgTimestamp(date);
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CorruptDataError(`${what} holds invalid JSON`, { cause: error });
  }
}

function toSchedule(row: ScheduleRow): Schedule {
  return {
    key: row.key,
    at: new Date(row.at_ms),
    message: parseJson(row.message, `schedule ${JSON.stringify(row.key)}`) as Message,
    version: row.version,
    attempts: row.attempts,
    dueAt: new Date(row.due_ms),
  };
}

function toEvent(aggregateId: string, row: EventRow): Event {
  const event: Event = { type: row.type, aggregateId, sequence: row.sequence, timestamp: row.ts };
  if (row.data !== null)
    event.data = parseJson(row.data, `event ${row.sequence} of ${JSON.stringify(aggregateId)}`);
  return event;
}
