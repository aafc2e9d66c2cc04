import {
  ConflictError,
  InvalidArgumentError,
  isOneShot,
  type Settlement,
  type StoredState,
  type Write,
} from '@duetime/core';
import type { Connection, PostgresExecutor } from './connection.js';
import { sqlState } from './errors.js';
import type { deadLetterSql } from './sql/dead-letters.js';
import type { eventSql } from './sql/events.js';
import type { scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';

export interface Statements {
  schedules: ReturnType<typeof scheduleSql>;
  events: ReturnType<typeof eventSql>;
  deadLetters: ReturnType<typeof deadLetterSql>;
}

/** A Date as timestamptz text; refuses instants before what PostgreSQL can store. */
export function timestampParam(field: string, date: Date): string {
  if (date.getTime() < PG_MIN_TIME)
    throw new InvalidArgumentError(field, date, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
  return pgTimestamp(date);
}

/** Error text as stored: PostgreSQL text cannot hold NUL characters. */
function errorText(text: string): string {
  return text.replaceAll('\u0000', '');
}

type Put = Extract<Write, { op: 'put' }>;

/** `n` empty column arrays, and a row appended to such columns. */
const columns = (n: number): unknown[][] => Array.from({ length: n }, () => []);
function push(columns: unknown[][], row: unknown[]): void {
  for (const [i, value] of row.entries()) columns[i]!.push(value);
}

/** One new version: its key, instants, payload and stored state. */
interface Row {
  key: string;
  at: Date;
  dueAt: Date;
  message: unknown;
  state: StoredState | undefined;
}

/** A row's parameters, in the order of the `put` statements' columns. */
function rowParams(row: Row): unknown[] {
  return [
    row.key,
    timestampParam('at', row.at),
    timestampParam('dueAt', row.dueAt),
    JSON.stringify(row.message),
    row.state === undefined ? null : JSON.stringify(row.state),
    row.state !== undefined && !isOneShot(row.state),
  ];
}

/**
 * New versions (puts, next occurrences) for one `put` statement. Their parameters are made when the
 * statement is sent ({@link params}, {@link one}), not when they are planned: a unit plans its writes
 * once to count its statements and again to send them.
 */
class Rows {
  readonly keys: string[] = [];
  readonly #rows: Row[] = [];
  /** The earliest due time among them. */
  earliest: number | undefined;

  add(key: string, at: Date, dueAt: Date, message: unknown, state: StoredState | undefined): void {
    this.keys.push(key);
    this.#rows.push({ key, at, dueAt, message, state });
    if (this.earliest === undefined || dueAt.getTime() < this.earliest) this.earliest = dueAt.getTime();
  }

  /** The columns as the arrays the `put` statements take. */
  params(): unknown[] {
    const columns: unknown[][] = [[], [], [], [], [], []];
    for (const row of this.#rows) push(columns, rowParams(row));
    return columns;
  }

  /** The only row's parameters, as the one-row statements take them. */
  one(): unknown[] {
    return rowParams(this.#rows[0]!);
  }
}

/** What statements a unit sends, and what they scheduled. */
export class Writer {
  readonly #connection: Connection;
  readonly #sql: Statements;
  /** Where the unit's statements go. */
  readonly exec: PostgresExecutor;
  /** The earliest due time the writes so far scheduled (for the announcement after the commit). */
  earliest: number | undefined;

  constructor(connection: Connection, sql: Statements, exec: PostgresExecutor) {
    this.#connection = connection;
    this.#sql = sql;
    this.exec = exec;
  }

  #note(at: number | undefined): void {
    if (at !== undefined && (this.earliest === undefined || at < this.earliest)) this.earliest = at;
  }

  #run(operation: string, text: string, params: unknown[]) {
    return this.#connection.query(operation, text, params, this.exec);
  }

  /**
   * Splits `writes` into the statements that apply them in order: runs of puts without `ifVersion` and
   * with distinct keys go as one multi-row upsert; every other write is a statement of its own.
   */
  static plan(writes: readonly Write[]): (Rows | Write)[] {
    const steps: (Rows | Write)[] = [];
    let rows: Rows | undefined;
    for (const w of writes) {
      if (w.op === 'put' && w.ifVersion === undefined) {
        if (!rows || rows.keys.includes(w.key)) {
          rows = new Rows();
          steps.push(rows);
        }
        rows.add(w.key, w.at, w.dueAt ?? w.at, w.message, w.recurrence);
      } else {
        rows = undefined;
        steps.push(w);
      }
    }
    return steps;
  }

  /** Applies `writes` in order; returns, per write, how many rows it changed. */
  async apply(writes: readonly Write[]): Promise<number[]> {
    const counts: number[] = [];
    for (const step of Writer.plan(writes)) {
      if (step instanceof Rows) {
        const sql = this.#sql.schedules;
        // A joined unit's puts call a function (`putCall`); one key goes by the scalar one.
        if (step.keys.length === 1 && sql.put === sql.putCall)
          await this.#run('schedule', sql.putOneCall, step.one());
        else await this.#run('schedule', sql.put, step.params());
        this.#note(step.earliest);
        for (const _ of step.keys) counts.push(1);
      } else counts.push(await this.#one(step));
    }
    return counts;
  }

  async #one(w: Write): Promise<number> {
    switch (w.op) {
      case 'put':
        return this.#putIfVersion(w);
      case 'delete':
        return (await this.#run('cancel schedule', this.#sql.schedules.delete, [w.key])).rowCount ?? 0;
      case 'deletePrefix':
        return (
          (await this.#run('cancel schedules by prefix', this.#sql.schedules.deletePrefix, [w.prefix]))
            .rowCount ?? 0
        );
      case 'deleteDead':
        return (await this.#run('delete dead letter', this.#sql.deadLetters.delete, [w.key])).rowCount ?? 0;
      case 'append':
        return this.#append(w);
    }
  }

  async #putIfVersion(w: Put): Promise<number> {
    const rows = new Rows();
    rows.add(w.key, w.at, w.dueAt ?? w.at, w.message, w.recurrence);
    const params = [...rows.one(), w.ifVersion];
    const result = await this.#run('schedule', this.#sql.schedules.putIfVersion, params);
    if (result.rowCount !== 1) throw new ConflictError('version', w.key);
    this.#note(rows.earliest);
    return 1;
  }

  async #append(w: Extract<Write, { op: 'append' }>): Promise<number> {
    if (w.events.length === 0) return 0;
    let count: number | null;
    try {
      ({ rowCount: count } = await this.exec.query(this.#sql.events.append, [
        w.aggregateId,
        w.expectedSequence,
        w.events.map((e) => e.type),
        w.events.map((e) => (e.data === undefined ? null : JSON.stringify(e.data))),
        w.events.map((e) => timestampParam('event.timestamp', new Date(e.timestamp))),
      ]));
    } catch (error) {
      if (sqlState(error) === '23505')
        throw new ConflictError('aggregate', w.aggregateId, undefined, { cause: error });
      throw this.#connection.error(error, 'append events');
    }
    if (count !== w.events.length) throw new ConflictError('aggregate', w.aggregateId);
    return count;
  }

  /**
   * Applies a delivery's settlements, one statement per kind that has any: dead letters, consumed
   * versions, next versions (after the consumed ones are gone), failed attempts, releases. Only versions
   * still claimed by `owner` are consumed or retried.
   */
  async settle(settlements: readonly Settlement[], owner: string): Promise<void> {
    if (settlements.length === 0) return;
    const [dead, consumed, retried] = [columns(7), columns(2), columns(6)];
    const next = new Rows();
    const released: string[] = [];
    for (const s of settlements) {
      const { key, version } = s.schedule;
      if (s.outcome === 'consume') {
        push(consumed, [key, version]);
        if (s.dead)
          push(dead, [
            key,
            version,
            timestampParam('at', s.schedule.at),
            JSON.stringify(s.schedule.message),
            s.dead.attempts,
            errorText(s.dead.error),
            timestampParam('deadAt', s.dead.deadAt),
          ]);
        if (s.next)
          next.add(key, s.next.at, s.next.dueAt ?? s.next.at, s.schedule.message, s.next.recurrence);
      } else if (s.outcome === 'retry' && s.failure) {
        const f = s.failure;
        push(retried, [
          key,
          version,
          f.attempts,
          errorText(f.error),
          timestampParam('failure.dueAt', f.dueAt),
          f.at ? timestampParam('failure.at', f.at) : null,
        ]);
        this.#note(f.dueAt.getTime());
      } else {
        released.push(key);
        this.#note(s.schedule.dueAt.getTime());
      }
    }
    const sql = this.#sql;
    if (dead[0]!.length > 0) await this.#run('keep dead letters', sql.deadLetters.put, dead);
    if (consumed[0]!.length > 0)
      await this.#run('consume schedules', sql.schedules.consume, [...consumed, owner]);
    if (next.keys.length > 0) {
      await this.#run('arm next occurrences', sql.schedules.next, next.params());
      this.#note(next.earliest);
    }
    if (retried[0]!.length > 0)
      await this.#run('record failed attempts', sql.schedules.retry, [...retried, owner]);
    if (released.length > 0) await this.#run('release schedules', sql.schedules.release, [released, owner]);
  }
}
