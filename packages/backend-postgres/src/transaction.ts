import {
  BackendError,
  ConflictError,
  type DeadLetterRecord,
  type DeliveryFailure,
  type DeliveryTransaction,
  type DriverTransaction,
  type Event,
  InvalidArgumentError,
  type Message,
  type Schedule,
  type StoredRecurrence,
} from '@duetime/core';
import type pg from 'pg';
import { type CheckedOutClient, type Connection, queryConfig, RAW_TYPES } from './connection.js';
import { isConnectionLost, sqlState } from './errors.js';
import type { ChangeNotifier } from './notifications.js';
import { toDeadLetter, toEvent, toSchedule } from './rows.js';
import type { DeadLetterRow, deadLetterSql } from './sql/dead-letters.js';
import type { EventRow, eventSql } from './sql/events.js';
import { literal } from './sql/ident.js';
import type { ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';

export type Statements = {
  schedules: ReturnType<typeof scheduleSql>;
  events: ReturnType<typeof eventSql>;
  deadLetters: ReturnType<typeof deadLetterSql>;
};

/**
 * Every transaction starts at READ COMMITTED whatever the server's default, because that is the level
 * duetime's statements are written for (see the store driver); the application may still raise it with
 * `SET TRANSACTION ISOLATION LEVEL …` as the first statement on `tx.sql`.
 */
export const BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';

type Result<R extends Record<string, unknown>> = pg.QueryResult<R> | pg.QueryResult<R>[];

/** The last result of a statement string (the simple protocol answers a multi-statement string with a list). */
export function last<R extends Record<string, unknown>>(result: Result<R>): pg.QueryResult<R> {
  return Array.isArray(result) ? result[result.length - 1]! : result;
}

function byKey(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A JSON value as a literal, or NULL. */
function json(value: unknown): string {
  return value === undefined ? 'NULL' : literal(JSON.stringify(value));
}

/** Error text as stored: PostgreSQL text cannot hold NUL characters. */
function errorText(text: string): string {
  return literal(text.replaceAll('\u0000', ''));
}

function copy<T>(from: Map<string, T>, into: Map<string, T>): void {
  for (const [key, row] of from) {
    into.delete(key);
    into.set(key, row);
  }
}

/** A buffered put's values: parameters of the statement sent on its own, or literals of a row. */
interface PutRow {
  key: string;
  at: string;
  message: string;
  recurrence: string | null;
}

function putLiteral(row: PutRow): string {
  const recurrence = row.recurrence === null ? 'NULL' : literal(row.recurrence);
  return `(${literal(row.key)}, ${literal(row.at)}, ${literal(row.message)}, ${recurrence})`;
}

/**
 * Writes not sent yet, each kind one multi-row statement when sent: puts (the last one per key wins),
 * schedules put back by a delivery, next occurrences of recurring schedules, dead letters. Their results
 * do not depend on the order the four statements run in: a put replaces whatever the key holds, while a
 * put-back or a re-arm only fills a key that has no active schedule, so a put of the same key wins in
 * either order, as it would have had each call run at once.
 */
class PendingWrites {
  readonly puts = new Map<string, PutRow>();
  readonly restores = new Map<string, string>();
  readonly rearms = new Map<string, string>();
  readonly dead = new Map<string, string>();
  /** The earliest deadline among the writes that schedule something, for the wake-up after commit. */
  earliest: number | undefined;

  get size(): number {
    return this.puts.size + this.restores.size + this.rearms.size + this.dead.size;
  }

  schedules(at: number): void {
    if (this.earliest === undefined || at < this.earliest) this.earliest = at;
  }

  /** Moves everything into `into` (a part's writes joining the batch's when the part is kept). */
  moveTo(into: PendingWrites): void {
    into.copyRows(this);
    if (this.earliest !== undefined) into.schedules(this.earliest);
    this.clear();
  }

  /** Copies the rows (not the deadline) of `from`, a later one of a key replacing an earlier one. */
  copyRows(from: PendingWrites): void {
    copy(from.puts, this.puts);
    copy(from.restores, this.restores);
    copy(from.rearms, this.rearms);
    copy(from.dead, this.dead);
  }

  /** The puts in key order, removed from the buffer. */
  takePuts(): PutRow[] {
    const sorted = [...this.puts].sort((a, b) => byKey(a[0], b[0])).map(([, row]) => row);
    this.puts.clear();
    return sorted;
  }

  clear(): void {
    this.puts.clear();
    this.restores.clear();
    this.rearms.clear();
    this.dead.clear();
    this.earliest = undefined;
  }

  /**
   * The statements (each followed by `; `) that write everything, and empties the rows. Rows go in key
   * order, so that concurrent transactions writing the same keys lock them in the same order.
   */
  take(sql: Statements): string {
    let text = '';
    const rows = (map: Map<string, string>) => {
      const sorted = [...map].sort((a, b) => byKey(a[0], b[0])).map(([, row]) => row);
      map.clear();
      return sorted;
    };
    if (this.puts.size > 0) text += `${sql.schedules.putMany(this.takePuts().map(putLiteral))}; `;
    if (this.restores.size > 0) text += `${sql.schedules.restoreMany(rows(this.restores))}; `;
    if (this.rearms.size > 0) text += `${sql.schedules.rearmMany(rows(this.rearms))}; `;
    if (this.dead.size > 0) text += `${sql.deadLetters.putMany(rows(this.dead))}; `;
    return text;
  }
}

/**
 * What plain transactions and deliveries share: statements sent on one checked-out client with the simple
 * protocol, values inlined as escaped literals, so that whatever is pending (BEGIN, SAVEPOINT, buffered
 * writes) travels in the same message as the statement that needs it.
 */
abstract class PostgresWork {
  protected readonly connection: Connection;
  protected out: CheckedOutClient;
  protected readonly statements: Statements;
  protected readonly notifier: ChangeNotifier;
  /** A failure of something queued by the `sql` getter, reported by the next call. */
  protected failure: unknown;

  constructor(
    connection: Connection,
    out: CheckedOutClient,
    statements: Statements,
    notifier: ChangeNotifier,
  ) {
    this.connection = connection;
    this.out = out;
    this.statements = statements;
    this.notifier = notifier;
  }

  /** Where `putSchedule` buffers its rows. */
  protected abstract get writes(): PendingWrites;

  /** The text that goes in front of the next statement (and is then considered sent). */
  protected abstract prefix(): string;

  /** Called when a statement failed: a plain transaction may re-send its first statement. */
  protected retryable(_error: unknown): boolean {
    return false;
  }

  /** Queues `text` on the client now (the application's queries follow it), recording its failure. */
  protected queue(text: string): void {
    if (text === '') return;
    this.out.client.query(text).catch((error: unknown) => {
      this.failure ??= error;
    });
  }

  protected reportFailure(operation: string): void {
    if (this.failure !== undefined) throw this.connection.error(this.failure, operation);
  }

  protected async execute<R extends Record<string, unknown>>(
    operation: string,
    statement: string,
  ): Promise<pg.QueryResult<R>> {
    this.reportFailure(operation);
    const text = this.prefix() + statement;
    try {
      return last((await this.out.client.query({ text, types: RAW_TYPES })) as Result<R>);
    } catch (error) {
      if (!this.retryable(error)) throw this.connection.error(error, operation);
      // The first statement found a pooled connection that had died (a restarted or failed-over
      // server): nothing of this transaction reached the server, so it starts over on a fresh one.
      this.out.release(true);
      this.out = await this.connection.checkout(operation);
      try {
        return last((await this.out.client.query({ text, types: RAW_TYPES })) as Result<R>);
      } catch (again) {
        throw this.connection.error(again, operation);
      }
    }
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const result = await this.execute<EventRow>(
      'load events',
      this.statements.events.load(literal(aggregateId)),
    );
    return result.rows.map((row) => toEvent(aggregateId, row));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const result = await this.execute<ScheduleRow>(
      'load schedule',
      this.statements.schedules.load(literal(key)),
    );
    const row = result.rows[0];
    return row ? toSchedule(row) : undefined;
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    if (events.length === 0) return;
    const rows = events.map(
      (e, i) =>
        `(${literal(aggregateId)}, ${expectedSequence + i + 1}, ${literal(e.type)}, ${json(e.data)}, ${literal(
          timestampParam('event.timestamp', new Date(e.timestamp)),
        )})`,
    );
    try {
      await this.execute('append events', this.statements.events.append(rows));
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (sqlState(cause) === '23505' && (cause as pg.DatabaseError).constraint === 'events_pkey')
        throw new ConflictError('aggregate', aggregateId, undefined, { cause });
      throw error;
    }
  }

  async putSchedule(key: string, at: Date, message: Message, recurrence?: StoredRecurrence): Promise<void> {
    const row: PutRow = {
      key,
      at: timestampParam('at', at),
      message: JSON.stringify(message),
      recurrence: recurrence === undefined ? null : JSON.stringify(recurrence),
    };
    const writes = this.writes;
    writes.puts.delete(key);
    writes.puts.set(key, row);
    writes.schedules(at.getTime());
  }

  async deleteSchedule(key: string): Promise<boolean> {
    const result = await this.execute('cancel schedule', this.statements.schedules.delete(literal(key)));
    return (result.rowCount ?? 0) > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const result = await this.execute(
      'cancel schedules by prefix',
      this.statements.schedules.deletePrefix(literal(prefix)),
    );
    return result.rowCount ?? 0;
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    const result = await this.execute<DeadLetterRow>(
      'load dead letter',
      this.statements.deadLetters.load(literal(key)),
    );
    const row = result.rows[0];
    return row ? toDeadLetter(row) : undefined;
  }

  async deleteDeadLetter(key: string): Promise<boolean> {
    const result = await this.execute('delete dead letter', this.statements.deadLetters.delete(literal(key)));
    return (result.rowCount ?? 0) > 0;
  }

  /** Sends `text` ending in COMMIT; throws when PostgreSQL rolled back instead (an earlier caught error). */
  protected async sendCommit(operation: string, text: string): Promise<void> {
    let result: pg.QueryResult;
    try {
      this.reportFailure(operation);
      result = last(await this.out.client.query(text));
    } catch (error) {
      // Whether a COMMIT that lost its connection took effect is unknown: report it, never retry it.
      await this.out.rollback();
      throw this.connection.error(error, operation);
    }
    this.out.release(false);
    // PostgreSQL answers COMMIT of a transaction already aborted by an error (one the application caught
    // and swallowed) with ROLLBACK, not with an error.
    if (result.command === 'ROLLBACK')
      throw new BackendError(
        operation,
        'the transaction had failed on an earlier statement (an error caught inside it) and was rolled back',
      );
  }
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
 */
export class PostgresTransaction extends PostgresWork implements DriverTransaction<pg.PoolClient> {
  readonly #writes = new PendingWrites();
  #begun = false;
  #finished = false;
  /** Set while the first statement is being sent: a lost connection then may start over. */
  #first = false;

  protected get writes(): PendingWrites {
    return this.#writes;
  }

  /** The pg client inside BEGIN … COMMIT; BEGIN is queued now, ahead of the application's queries. */
  get sql(): pg.PoolClient {
    if (!this.#begun) {
      this.#begun = true;
      this.queue(BEGIN);
    }
    return this.out.client;
  }

  protected prefix(): string {
    let text = '';
    this.#first = !this.#begun;
    if (!this.#begun) {
      this.#begun = true;
      text = `${BEGIN}; `;
    }
    return text + this.#writes.take(this.statements);
  }

  protected override retryable(error: unknown): boolean {
    return this.#first && isConnectionLost(error) && !this.connection.closed;
  }

  async commit(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    if (!this.#begun && this.#writes.size === 0) {
      this.out.release(false); // nothing was sent: there is nothing to commit
      return;
    }
    const earliest = this.#writes.earliest;
    try {
      if (this.#begun) await this.sendCommit('commit', `${this.prefix()}COMMIT`);
      else await this.#putOnly();
    } catch (error) {
      // It may have committed all the same.
      if (earliest !== undefined) this.notifier.quiet.changed();
      throw error;
    }
    if (earliest !== undefined) this.notifier.announce(earliest);
  }

  /**
   * A transaction that only scheduled: nothing was sent, so its puts are one statement, atomic on its own
   * (no BEGIN, no COMMIT), sent as a prepared statement with the rows as arrays: parsed and planned once
   * per connection, whatever the number of rows.
   */
  async #putOnly(): Promise<void> {
    const rows = this.#writes.takePuts();
    try {
      this.reportFailure('commit');
      await this.out.client.query(
        queryConfig(this.connection.prepared('put_schedules', this.statements.schedules.putArrays), [
          rows.map((r) => r.key),
          rows.map((r) => r.at),
          rows.map((r) => r.message),
          rows.map((r) => r.recurrence),
        ]),
      );
    } catch (error) {
      // Whether a statement that lost its connection took effect is unknown: report it, never retry it.
      this.out.release(isConnectionLost(error));
      throw this.connection.error(error, 'commit');
    }
    this.out.release(false);
  }

  async rollback(): Promise<void> {
    this.#finished = true;
    this.#writes.clear();
    if (!this.#begun) this.out.release(false);
    else await this.out.rollback();
  }
}

const SAVEPOINT = 'duetime_part';
const RELEASE = `RELEASE SAVEPOINT ${SAVEPOINT}; `;
const ROLL_BACK_PART = `ROLLBACK TO SAVEPOINT ${SAVEPOINT}; RELEASE SAVEPOINT ${SAVEPOINT}; `;

/**
 * A delivery batch: one transaction on its own pooled connection, begun by the claim (`BEGIN` and one
 * `DELETE … RETURNING` that takes the page with `FOR UPDATE SKIP LOCKED`, in one round trip). Each part
 * gets a savepoint, sent only with the part's first statement: a processor that issues no SQL costs no
 * round trip.
 *
 * Nothing goes to the server on its own when it can travel with something that must be sent anyway:
 * - `savepoint()` sends nothing; `SAVEPOINT` goes in front of the part's first statement (queued by the
 *   `sql` getter when the application takes the client first).
 * - `releaseSavepoint()` reads the transaction status PostgreSQL sent with the part's last answer: an
 *   aborted transaction (a statement error the processor caught) throws; otherwise the `RELEASE` goes in
 *   front of the next message. `rollbackToSavepoint()` sends nothing either: `ROLLBACK TO` goes first in
 *   the next message.
 * - Puts, put-backs (`restore`), re-arms and dead letters are buffered and sent as one multi-row statement
 *   each: in front of the next part's first statement, or with the COMMIT. A batch whose processors only
 *   schedule (or do nothing) is two round trips: the claim and the commit.
 * - Writes of earlier parts sent inside a part's savepoint are buffered again when that part rolls back.
 */
export class PostgresDelivery extends PostgresWork implements DeliveryTransaction<pg.PoolClient> {
  readonly claimed: readonly Schedule[];
  /** Writes of the batch outside any part, and of kept parts. */
  readonly #batch = new PendingWrites();
  /** Writes of the current part. */
  readonly #part = new PendingWrites();
  /** Batch writes sent inside the current part's savepoint, buffered again if the part rolls back. */
  readonly #sentInPart = new PendingWrites();
  #inPart = false;
  #savepointSent = false;
  /** How the previous part's savepoint ends, sent in front of the next message. */
  #end = '';
  #finished = false;

  constructor(
    connection: Connection,
    out: CheckedOutClient,
    statements: Statements,
    notifier: ChangeNotifier,
    claimed: Schedule[],
  ) {
    super(connection, out, statements, notifier);
    this.claimed = claimed;
  }

  protected get writes(): PendingWrites {
    return this.#inPart ? this.#part : this.#batch;
  }

  /** The end of the previous savepoint, this part's SAVEPOINT with the batch's writes, when not sent yet. */
  #opening(): string {
    let text = this.#end;
    this.#end = '';
    if (this.#inPart && !this.#savepointSent) {
      this.#savepointSent = true;
      text += `SAVEPOINT ${SAVEPOINT}; `;
      this.#sentInPart.clear();
      this.#sentInPart.copyRows(this.#batch);
    }
    // While a part is open its writes are the part's own: the batch's are only those of earlier parts.
    return text + this.#batch.take(this.statements);
  }

  protected prefix(): string {
    return this.#opening() + this.#part.take(this.statements);
  }

  /** The pg client inside the delivery's transaction; the part's SAVEPOINT is queued now, ahead of its queries. */
  get sql(): pg.PoolClient {
    this.queue(this.#opening());
    return this.out.client;
  }

  savepoint(_key: string): void {
    if (this.#inPart) throw new BackendError('start a delivery part', 'the previous part was not ended');
    this.#inPart = true;
    this.#savepointSent = false;
  }

  async releaseSavepoint(): Promise<void> {
    if (!this.#inPart) return;
    if (this.#savepointSent) {
      if (this.failure !== undefined) throw this.connection.error(this.failure, 'end a delivery part');
      const status = this.#status();
      if (status === 'E') throw new BackendError('end a delivery part', ABORTED);
      if (status === 'I')
        throw new BackendError(
          'end a delivery part',
          'the processor ended the delivery’s transaction (COMMIT or ROLLBACK on tx.sql)',
        );
      if (status === 'T') this.#end = RELEASE;
      else {
        // The status is unknown (a driver without getTransactionStatus, or an answer still arriving: pg
        // rejects a failed query before the server's ReadyForQuery): ask.
        try {
          await this.out.client.query(RELEASE);
        } catch (error) {
          if (sqlState(error) === IN_FAILED_TRANSACTION)
            throw new BackendError('end a delivery part', ABORTED, { cause: error });
          throw this.connection.error(error, 'end a delivery part');
        }
      }
    }
    this.#inPart = false;
    this.#savepointSent = false;
    this.#sentInPart.clear();
    this.#part.moveTo(this.#batch);
  }

  async rollbackToSavepoint(): Promise<void> {
    if (!this.#inPart) return;
    if (this.#savepointSent) {
      this.#end = ROLL_BACK_PART;
      this.#batch.copyRows(this.#sentInPart);
      this.failure = undefined;
    }
    this.#inPart = false;
    this.#savepointSent = false;
    this.#sentInPart.clear();
    this.#part.clear();
  }

  /** 'T' in a usable transaction, 'E' in an aborted one, undefined when the client cannot tell now. */
  #status(): string | undefined {
    const client = this.out.client as pg.PoolClient & {
      readyForQuery?: boolean;
      getTransactionStatus?: () => string | null;
    };
    // Only while nothing is queued or running does the last ReadyForQuery describe the transaction.
    if (client.readyForQuery !== true || typeof client.getTransactionStatus !== 'function') return undefined;
    return client.getTransactionStatus() ?? undefined;
  }

  async restore(schedule: Schedule, failure?: DeliveryFailure): Promise<void> {
    const at = failure?.at ?? schedule.at;
    const dueAt = failure?.dueAt ?? schedule.dueAt;
    const error = failure ? failure.error : schedule.lastError;
    const row = `(${literal(schedule.key)}, ${literal(timestampParam('at', at))}, ${literal(
      timestampParam('failure.dueAt', dueAt),
    )}, ${literal(schedule.version)}, ${literal(failure?.attempts ?? schedule.attempts)}, ${json(
      schedule.message,
    )}, ${error === undefined ? 'NULL' : errorText(error)}, ${json(schedule.recurrence)})`;
    const writes = this.writes;
    writes.restores.set(schedule.key, row);
    // Put back unrun (a drain): due now, so another process may take it at once.
    if (!failure) writes.schedules(dueAt.getTime());
  }

  async deadLetter(
    schedule: Schedule,
    record: { attempts: number; error: string; deadAt: Date },
  ): Promise<void> {
    const row = `(${literal(schedule.key)}, ${literal(schedule.version)}, ${literal(
      timestampParam('at', schedule.at),
    )}, ${json(schedule.message)}, ${literal(record.attempts)}, ${errorText(record.error)}, ${literal(
      timestampParam('deadAt', record.deadAt),
    )})`;
    const writes = this.writes;
    writes.dead.delete(schedule.key);
    writes.dead.set(schedule.key, row);
  }

  async rearm(schedule: Schedule, at: Date, recurrence: StoredRecurrence): Promise<void> {
    const row = `(${literal(schedule.key)}, ${literal(timestampParam('at', at))}, ${json(
      schedule.message,
    )}, ${json(recurrence)})`;
    const writes = this.writes;
    writes.rearms.set(schedule.key, row);
    writes.schedules(at.getTime());
  }

  async commit(): Promise<ReadonlyMap<string, Error>> {
    if (this.#finished) throw new BackendError('commit a delivery batch', 'the delivery has already ended');
    this.#finished = true;
    // A part still open when the batch commits is kept, as if released.
    if (this.#inPart) {
      if (this.#savepointSent && this.#status() === 'E') {
        await this.out.rollback();
        throw new BackendError('commit a delivery batch', ABORTED);
      }
      this.#inPart = false;
      this.#part.moveTo(this.#batch);
    }
    const earliest = this.#batch.earliest;
    try {
      await this.sendCommit('commit a delivery batch', `${this.#opening()}COMMIT`);
    } catch (error) {
      // It may have committed all the same.
      if (earliest !== undefined) this.notifier.quiet.changed();
      throw error;
    }
    if (earliest !== undefined) this.notifier.announce(earliest);
    return NOTHING_REJECTED;
  }

  async rollback(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    this.#batch.clear();
    this.#part.clear();
    await this.out.rollback();
  }
}

/** SQLSTATE of a statement sent in an aborted transaction. */
const IN_FAILED_TRANSACTION = '25P02';

const ABORTED =
  'a statement inside the part failed (an error caught inside the processor) and aborted the transaction';

/** Interactive deliveries commit every part or none: nothing is ever rejected on its own. */
const NOTHING_REJECTED: ReadonlyMap<string, Error> = new Map();

/** A Date as a timestamptz literal's text; refuses instants before what PostgreSQL can store. */
export function timestampParam(field: string, date: Date): string {
  if (date.getTime() < PG_MIN_TIME)
    throw new InvalidArgumentError(field, date, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
  return pgTimestamp(date);
}
