import {
  BackendError,
  ConflictError,
  type DriverTransaction,
  type Event,
  InvalidArgumentError,
  type Message,
  type Schedule,
} from '@duetime/core';
import type pg from 'pg';
import { type CheckedOutClient, type Connection, RAW_TYPES } from './connection.js';
import { isConnectionLost, sqlState } from './errors.js';
import type { ChangeNotifier } from './notifications.js';
import { toEvent, toSchedule } from './rows.js';
import type { EventRow, eventSql } from './sql/events.js';
import { literal } from './sql/ident.js';
import type { ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';

export type Statements = { schedules: ReturnType<typeof scheduleSql>; events: ReturnType<typeof eventSql> };

interface PendingPut {
  key: string;
  at: string;
  message: Message;
}

/**
 * Every transaction starts at READ COMMITTED whatever the server's default, because that is the level
 * duetime's statements are written for (see the store driver); the application may still raise it with
 * `SET TRANSACTION ISOLATION LEVEL …` as the first statement on `tx.sql`.
 */
const BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';

type Result<R extends Record<string, unknown>> = pg.QueryResult<R> | pg.QueryResult<R>[];

/** The last result of a statement string (the simple protocol answers a multi-statement string with a list). */
function last<R extends Record<string, unknown>>(result: Result<R>): pg.QueryResult<R> {
  return Array.isArray(result) ? result[result.length - 1]! : result;
}

/**
 * One interactive transaction on a client checked out of the pool, sent with as few round trips as the
 * contract allows:
 * - BEGIN is not sent on its own: it travels in front of the transaction's first statement (or is queued
 *   on the client as soon as the application takes `tx.sql`, ahead of its own queries).
 * - `putSchedule` is buffered (the last put per key wins) and written in one multi-row upsert in front of
 *   the next statement, or with the COMMIT. So a transaction that only schedules is one round trip:
 *   `BEGIN; INSERT …; COMMIT`. The application's own SQL in the same transaction
 *   sees those rows once a duetime call or the commit has sent them (`tx.loadSchedule` always does).
 * - Other instances are told after the commit (see {@link ChangeNotifier.announce}).
 * - Statements use the simple protocol with values inlined as escaped literals, so the pieces can share
 *   one message.
 */
export class PostgresTransaction implements DriverTransaction<pg.PoolClient> {
  readonly #connection: Connection;
  #out: CheckedOutClient;
  readonly #sql: Statements;
  readonly #notifier: ChangeNotifier;
  readonly #puts = new Map<string, PendingPut>();
  #begun = false;
  #putAny = false;
  #earliest: number | undefined;
  #finished = false;
  /** A failure of BEGIN queued by the `sql` getter, reported by the next call. */
  #failure: unknown;

  constructor(connection: Connection, out: CheckedOutClient, sql: Statements, notifier: ChangeNotifier) {
    this.#connection = connection;
    this.#out = out;
    this.#sql = sql;
    this.#notifier = notifier;
  }

  /** The pg client inside BEGIN … COMMIT; BEGIN is queued now, ahead of the application's queries. */
  get sql(): pg.PoolClient {
    if (!this.#begun) {
      this.#begun = true;
      this.#out.client.query(BEGIN).catch((error: unknown) => {
        this.#failure ??= error;
      });
    }
    return this.#out.client;
  }

  /** BEGIN when not sent yet, then the buffered puts: the text that goes in front of the next statement. */
  #prefix(): string {
    let text = '';
    if (!this.#begun) {
      this.#begun = true;
      text = `${BEGIN}; `;
    }
    if (this.#puts.size > 0) {
      // Key order, so that concurrent transactions putting the same keys lock them in the same order.
      const batch = [...this.#puts.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      this.#puts.clear();
      const rows = batch.map(
        (p) => `(${literal(p.key)}, ${literal(p.at)}, ${literal(JSON.stringify(p.message))})`,
      );
      text += `${this.#sql.schedules.putMany(rows)}; `;
    }
    return text;
  }

  async #execute<R extends Record<string, unknown>>(
    operation: string,
    statement: string,
  ): Promise<pg.QueryResult<R>> {
    this.#reportFailure(operation);
    const first = !this.#begun;
    const text = this.#prefix() + statement;
    try {
      return last((await this.#out.client.query({ text, types: RAW_TYPES })) as Result<R>);
    } catch (error) {
      // The first statement found a pooled connection that had died (a restarted or failed-over
      // server): nothing of this transaction reached the server, so it starts over on a fresh one.
      if (!first || !isConnectionLost(error) || this.#connection.closed)
        throw this.#connection.error(error, operation);
      this.#out.release(true);
      this.#out = await this.#connection.checkout(operation);
      try {
        return last((await this.#out.client.query({ text, types: RAW_TYPES })) as Result<R>);
      } catch (again) {
        throw this.#connection.error(again, operation);
      }
    }
  }

  #reportFailure(operation: string): void {
    if (this.#failure !== undefined) throw this.#connection.error(this.#failure, operation);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const result = await this.#execute<EventRow>('load events', this.#sql.events.load(literal(aggregateId)));
    return result.rows.map((row) => toEvent(aggregateId, row));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const result = await this.#execute<ScheduleRow>('load schedule', this.#sql.schedules.load(literal(key)));
    const row = result.rows[0];
    return row ? toSchedule(row) : undefined;
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    if (events.length === 0) return;
    const rows = events.map(
      (e, i) =>
        `(${literal(aggregateId)}, ${expectedSequence + i + 1}, ${literal(e.type)}, ${
          e.data === undefined ? 'NULL' : literal(JSON.stringify(e.data))
        }, ${literal(timestampParam('event.timestamp', new Date(e.timestamp)))})`,
    );
    try {
      await this.#execute('append events', this.#sql.events.append(rows));
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (sqlState(cause) === '23505' && (cause as pg.DatabaseError).constraint === 'events_pkey')
        throw new ConflictError('aggregate', aggregateId, undefined, { cause });
      throw error;
    }
  }

  async putSchedule(key: string, at: Date, message: Message): Promise<void> {
    const entry = { key, at: timestampParam('at', at), message };
    this.#puts.delete(key);
    this.#puts.set(key, entry);
    this.#putAny = true;
    const t = at.getTime();
    if (this.#earliest === undefined || t < this.#earliest) this.#earliest = t;
  }

  async deleteSchedule(key: string): Promise<boolean> {
    const result = await this.#execute('cancel schedule', this.#sql.schedules.delete(literal(key)));
    return (result.rowCount ?? 0) > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const result = await this.#execute(
      'cancel schedules by prefix',
      this.#sql.schedules.deletePrefix(literal(prefix)),
    );
    return result.rowCount ?? 0;
  }

  async consume(key: string, version: number): Promise<boolean> {
    const result = await this.#execute(
      'consume schedule',
      this.#sql.schedules.consume(literal(key), literal(version)),
    );
    return result.rowCount === 1;
  }

  async commit(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    if (!this.#begun && this.#puts.size === 0) {
      this.#out.release(false); // nothing was sent: there is nothing to commit
      return;
    }
    let result: pg.QueryResult;
    try {
      this.#reportFailure('commit');
      result = last(await this.#out.client.query(`${this.#prefix()}COMMIT`));
    } catch (error) {
      // Whether a COMMIT that lost its connection took effect is unknown: report it, never retry it.
      await this.#out.rollback();
      throw this.#connection.error(error, 'commit');
    }
    this.#out.release(false);
    // PostgreSQL answers COMMIT of a transaction already aborted by an error (one the application caught
    // and swallowed) with ROLLBACK, not with an error.
    if (result.command === 'ROLLBACK')
      throw new BackendError(
        'commit',
        'the transaction had failed on an earlier statement (an error caught inside it) and was rolled back',
      );
    if (this.#putAny && this.#earliest !== undefined) this.#notifier.announce(this.#earliest);
  }

  async rollback(): Promise<void> {
    this.#finished = true;
    this.#puts.clear();
    if (!this.#begun) this.#out.release(false);
    else await this.#out.rollback();
  }
}

/** A Date as a timestamptz literal's text; refuses instants before what PostgreSQL can store. */
function timestampParam(field: string, date: Date): string {
  if (date.getTime() < PG_MIN_TIME)
    throw new InvalidArgumentError(field, date, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
  return pgTimestamp(date);
}
