import { randomBytes } from 'node:crypto';
import {
  BackendError,
  type Changes,
  type Claimed,
  type ClaimRequest,
  type Clock,
  type DeadLetterFields,
  type DeadLetterListQuery,
  type DeadLetterRecord,
  decodeDeadLetter,
  decodeEvent,
  decodePreview,
  decodeSchedule,
  type Event,
  type EventFields,
  InvalidArgumentError,
  type ListQuery,
  type Schedule,
  type ScheduleHead,
  type StoreAdapter,
  systemClock,
  type WatchEvent,
  type Write,
} from '@duetime/core';
import type pg from 'pg';
import type { CheckedOutClient, Connection, PostgresExecutor } from './connection.js';
import { type Hosted, host, type TransactionRunner } from './hosted.js';
import type { ChangeNotifier } from './notifications.js';
import { partSavepoint, partStatements, runPart } from './parts.js';
import { deadLetterSql } from './sql/dead-letters.js';
import { eventSql } from './sql/events.js';
import { quoteIdent } from './sql/ident.js';
import { type ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';
import {
  BEGIN,
  control,
  guardSql,
  IN_FAILED_TRANSACTION,
  JOIN,
  NO_TRANSACTION,
  oneStatement,
  type PostgresUnit,
  refusal,
  sqlStateOf,
  transactionStatus,
} from './unit.js';
import { type Statements, Writer } from './writes.js';

export type { PostgresUnit };

/**
 * The store adapter on PostgreSQL, interactive: each unit is a transaction at READ COMMITTED, made safe by
 * row locks and constraints instead of snapshots (a put is an upsert holding the key's row lock; an
 * append relies on the primary key). A delivery first claims its schedules in a short statement committed
 * on its own (`claimed_until`, `claim_owner`: see `claim` in sql/schedules.ts), then settles them in its
 * transaction with one statement per kind of outcome.
 */
export class PostgresStore implements StoreAdapter<pg.PoolClient, PostgresUnit> {
  readonly #connection: Connection;
  readonly #notifier: ChangeNotifier;
  readonly #sql: Statements;
  /**
   * The statements of units whose statements go through the application's library, unprepared (joined
   * and hosted units): their puts call the functions whose plans the session keeps.
   */
  readonly #librarySql: Statements;
  readonly #where: string;
  readonly #claimTimeoutMs: number;
  readonly renewEveryMs: number;

  readonly #join: { clock: Clock; joinNotifyWithinMs: number };
  /** Opens every transaction through the application's library (the `transactions` option). */
  readonly #runner: TransactionRunner | undefined;

  constructor(
    connection: Connection,
    notifier: ChangeNotifier,
    claimTimeoutMs: number,
    join: { clock: Clock; joinNotifyWithinMs: number } = { clock: systemClock, joinNotifyWithinMs: 30_000 },
    runner?: TransactionRunner,
  ) {
    this.#join = join;
    this.#runner = runner;
    this.#connection = connection;
    this.#notifier = notifier;
    const s = quoteIdent(connection.target.schema);
    this.#sql = { schedules: scheduleSql(s), events: eventSql(s), deadLetters: deadLetterSql(s) };
    this.#librarySql = {
      ...this.#sql,
      schedules: { ...this.#sql.schedules, put: this.#sql.schedules.putCall },
    };
    this.#where = `schema ${JSON.stringify(connection.target.schema)}`;
    this.#claimTimeoutMs = claimTimeoutMs;
    this.renewEveryMs = Math.max(1, Math.floor(claimTimeoutMs / 3));
  }

  async begin(claim?: ClaimRequest): Promise<PostgresUnit> {
    const owner = randomBytes(8).toString('hex');
    let claimed: Claimed[] | undefined;
    if (claim) {
      claimed = await this.#claim(claim, owner);
      if (claimed.length === 0)
        return { owner, claimed, joined: false, begun: false, saved: false, ended: false };
    }
    let unit: PostgresUnit;
    try {
      unit = this.#runner
        ? this.#hostedUnit(await host(this.#runner, this.#connection), owner, claimed)
        : await this.#checkedOutUnit(owner, claimed);
    } catch (error) {
      if (claimed) await this.#release(claimed, owner);
      throw error;
    }
    if (claimed) {
      try {
        await this.#begin(unit);
        const keys = claimed.map((c) => c.key);
        await this.#connection.query(
          'lock claimed schedules',
          this.#sql.schedules.lock,
          [keys, owner],
          unit.writer!.exec,
        );
      } catch (error) {
        await this.rollback(unit).catch(() => {});
        throw error;
      }
    }
    return unit;
  }

  #unit(
    client: pg.ClientBase,
    fields: Pick<PostgresUnit, 'owner' | 'out' | 'joined' | 'claimed' | 'exec'>,
  ): PostgresUnit {
    // An object literal of the fields, not a spread of `fields`: a spread costs microseconds per unit (a
    // join makes one per call).
    const unit: PostgresUnit = {
      owner: fields.owner,
      out: fields.out,
      joined: fields.joined,
      claimed: fields.claimed,
      exec: fields.exec,
      client,
      writer: new Writer(
        this.#connection,
        fields.joined ? this.#librarySql : this.#sql,
        fields.exec ?? this.#connection.executor(client),
      ),
      begun: fields.joined,
      saved: false,
      ended: false,
      sql: guardSql(client, () => {
        const failed = (error: unknown) => {
          unit.failure ??= error;
        };
        if (unit.part) return unit.part.saved ? undefined : { statements: partStatements(unit), failed };
        if (unit.joined && !unit.saved) {
          // The application's own statements through tx.sql are undone with duetime's when fn throws.
          unit.saved = true;
          Promise.resolve(unit.writer!.exec.query(`SAVEPOINT ${JOIN}`, [])).catch(failed);
          return undefined;
        }
        if (unit.begun) return undefined;
        unit.begun = true;
        return { statements: [BEGIN], failed };
      }) as pg.PoolClient,
    };
    return unit;
  }

  async #checkedOutUnit(owner: string, claimed: Claimed[] | undefined): Promise<PostgresUnit> {
    const out: CheckedOutClient = await this.#connection.checkout('begin transaction');
    return this.#unit(out.client, { owner, out, joined: false, ...(claimed ? { claimed } : {}) });
  }

  /** A unit on a transaction the application's library opened (the `transactions` option). */
  #hostedUnit(hosted: Hosted, owner: string, claimed: Claimed[] | undefined): PostgresUnit {
    return {
      owner,
      joined: false,
      hosted,
      exec: hosted.exec,
      sql: hosted.handle as pg.PoolClient,
      writer: new Writer(this.#connection, this.#librarySql, hosted.exec),
      ...(claimed ? { claimed } : {}),
      begun: true,
      saved: false,
      ended: false,
    };
  }

  async #claim(claim: ClaimRequest, owner: string): Promise<Claimed[]> {
    // Nothing can be due before the earliest instant PostgreSQL stores.
    if (claim.now.getTime() < PG_MIN_TIME) return [];
    const result = await this.#connection.query<ScheduleRow>(
      'claim due schedules',
      this.#sql.schedules.claim,
      [pgTimestamp(claim.now), claim.limit, this.#claimTimeoutMs, owner],
    );
    return result.rows.map((row) => {
      const schedule: Claimed = this.#schedule(row);
      if (row.interrupted) schedule.interrupted = true;
      return schedule;
    });
  }

  /** Ends claims in a short statement of their own, telling other instances they are due again. */
  async #release(claimed: readonly Claimed[], owner: string): Promise<void> {
    if (claimed.length === 0) return;
    await this.#connection.query('release schedules', this.#sql.schedules.release, [
      claimed.map((s) => s.key),
      owner,
    ]);
    this.#notifier.announce(Math.min(...claimed.map((s) => s.dueAt.getTime())));
  }

  async #begin(unit: PostgresUnit): Promise<void> {
    if (unit.ended) throw new BackendError('use a transaction', 'the transaction has already ended');
    if (unit.failure !== undefined) throw this.#connection.error(unit.failure, 'begin transaction');
    if (unit.joined) return this.#save(unit);
    if (!unit.begun) {
      unit.begun = true;
      await control(this.#connection, unit, 'begin transaction', BEGIN);
    }
    if (unit.part && !unit.part.saved) {
      try {
        await partSavepoint(unit);
      } catch (error) {
        throw this.#connection.error(error, 'start a delivery part');
      }
    }
  }

  /**
   * Processors may run at once on a unit whose connection pipelines (a pool made with `pipeline: true`):
   * their statements go out together, in the order sent. On a transaction the application's library
   * opened, when its executor says it takes statements sent without waiting (`concurrent`).
   */
  concurrent(unit: PostgresUnit): boolean {
    if (unit.hosted) return unit.hosted.concurrent;
    return unit.exec === undefined && pipelines(unit.client);
  }

  /** Runs one processor under a savepoint (see parts.ts). */
  async part<T>(unit: PostgresUnit, fn: () => Promise<T>): Promise<T> {
    await this.#begin(unit);
    return runPart(this.#connection, unit, fn);
  }

  async write(unit: PostgresUnit, writes: readonly Write[]): Promise<number[]> {
    await this.#begin(unit);
    return unit.writer!.apply(writes);
  }

  async commit(unit: PostgresUnit, changes: Changes): Promise<void> {
    if (unit.ended) throw new BackendError('commit', 'the transaction has already ended');
    const writer = unit.writer;
    if (!writer) {
      // A claim that found nothing: no transaction was opened.
      unit.ended = true;
      return;
    }
    const operation = unit.claimed ? 'commit a delivery batch' : 'commit';
    try {
      if (!unit.begun && !unit.joined && (await this.#alone(unit, changes))) return;
      // A join that sent nothing yet and writes one statement needs no savepoint: the statement is whole
      // or, failing, fails the application's transaction as any of its own statements would.
      if (!(unit.joined && !unit.saved && oneStatement(changes))) await this.#begin(unit);
      await writer.apply(changes.writes);
      await writer.settle(changes.settlements, unit.owner);
      if (unit.joined) {
        // Only what a watching dispatcher would not find in time by its own rescan (see joinNotifyWithinMs).
        const { clock, joinNotifyWithinMs } = this.#join;
        if (writer.earliest !== undefined && writer.earliest <= clock.now() + joinNotifyWithinMs)
          await this.#connection.query(
            'announce schedule change',
            'SELECT 1 AS sent FROM pg_notify($1, $2)',
            [this.#notifier.channel, `${this.#notifier.instanceId}:${writer.earliest}`],
            unit.exec,
          );
        // The savepoint is left to the application's commit, which ends it with everything else: one round
        // trip less per join (a later join in the same transaction takes one of the same name).
        unit.ended = true;
        return;
      }
      if (unit.hosted) {
        // The application's library commits when its function returns.
        unit.ended = true;
        await unit.hosted.end(true);
      } else {
        const result = await control(this.#connection, unit, operation, 'COMMIT');
        unit.ended = true;
        unit.out!.release(false);
        // PostgreSQL answers COMMIT of a transaction already aborted by an error (one the application
        // caught and swallowed) with ROLLBACK, not with an error.
        if (result.command === 'ROLLBACK')
          throw new BackendError(
            operation,
            'the transaction had failed on an earlier statement (an error caught inside it) and was rolled back',
          );
      }
    } catch (error) {
      if (!unit.ended) await this.rollback(unit).catch(() => {});
      else if (unit.claimed) await this.#release(unit.claimed, unit.owner).catch(() => {});
      throw error;
    }
    if (writer.earliest !== undefined) this.#notifier.announce(writer.earliest);
  }

  /**
   * A plain transaction that sent nothing yet: with no writes, it ends without a round trip; with writes
   * that are one statement (puts of distinct keys), that statement is the transaction.
   */
  async #alone(unit: PostgresUnit, changes: Changes): Promise<boolean> {
    if (unit.claimed || !oneStatement(changes)) return false;
    if (changes.writes.length > 0) await unit.writer!.apply(changes.writes);
    unit.ended = true;
    unit.out!.release(false);
    if (unit.writer!.earliest !== undefined) this.#notifier.announce(unit.writer!.earliest);
    return true;
  }

  async rollback(unit: PostgresUnit): Promise<void> {
    if (unit.ended) return;
    unit.ended = true;
    try {
      if (unit.joined) {
        if (!unit.saved) return;
        await control(
          this.#connection,
          unit,
          'undo the joined writes',
          `ROLLBACK TO SAVEPOINT ${JOIN}; RELEASE SAVEPOINT ${JOIN}`,
        );
      } else if (unit.hosted) {
        await unit.hosted.end(false);
      } else if (unit.out) {
        if (unit.begun) await unit.out.rollback();
        else unit.out.release(false);
      }
    } finally {
      if (unit.claimed) await this.#release(unit.claimed, unit.owner);
    }
  }

  /**
   * Joins the application's transaction. `handle` is an executor of it: anything with
   * `query(text, params)` answering `{ rows, rowCount }` (`SqlExecutor`, from `@duetime/bindings` for
   * Drizzle, Kysely, Knex, TypeORM, Prisma and postgres.js), or a node-postgres client after `BEGIN`.
   * Every statement goes through it as text with positional parameters; results are read whatever type
   * parsers the application's library applies.
   */
  async join(handle: unknown): Promise<PostgresUnit> {
    const client = handle as pg.ClientBase | null;
    if (typeof client !== 'object' || client === null || typeof client.query !== 'function')
      throw new InvalidArgumentError(
        'handle',
        handle,
        'must be an executor of a transaction (SqlExecutor: see @duetime/bindings) or a pg client (PoolClient or Client) inside BEGIN',
      );
    if (typeof (client as { totalCount?: unknown }).totalCount === 'number')
      throw new InvalidArgumentError(
        'handle',
        '(pg.Pool)',
        'is a pool, which runs each statement outside any transaction: pass a client inside BEGIN, or an executor of the transaction',
      );
    this.#connection.check();
    const schema = this.#connection.target.schema;
    // A node-postgres client (it connects) takes a statement's name in its config object; an executor
    // takes it as the third argument (SqlExecutor), and may ignore it.
    const pgClient = typeof (client as { connect?: unknown }).connect === 'function';
    const run = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    const exec: PostgresExecutor = {
      query: async (text, params, name) => {
        const values = [...(params ?? [])];
        let result: { rows?: unknown[]; rowCount?: number | null };
        try {
          result = (await (name === undefined
            ? run(text, values)
            : pgClient
              ? run({ name, text, values })
              : run(text, values, name))) as typeof result;
        } catch (error) {
          throw elsewhere(error, schema) ?? error;
        }
        const rows = (Array.isArray(result?.rows) ? result.rows : []) as never[];
        return { rows, rowCount: result?.rowCount ?? rows.length };
      },
    };
    const status = transactionStatus(handle);
    if (status === 'I' || status === 'E')
      throw refusal(status === 'I' ? NO_TRANSACTION : IN_FAILED_TRANSACTION);
    // A joined unit never claims or settles: it needs no owner.
    const unit = this.#unit(client, { owner: '', joined: true, exec });
    // A handle that cannot tell its state is asked by a savepoint, which refuses it when it is outside any
    // transaction or in a failed one.
    if (status === undefined) await this.#save(unit);
    return unit;
  }

  /** Takes the joined unit's savepoint, once. */
  async #save(unit: PostgresUnit): Promise<void> {
    if (unit.saved) return;
    unit.saved = true;
    try {
      await unit.writer!.exec.query(`SAVEPOINT ${JOIN}`, []);
    } catch (error) {
      const state = sqlStateOf(error);
      if (state === NO_TRANSACTION || state === IN_FAILED_TRANSACTION) throw refusal(state);
      throw this.#connection.error(error, 'join a transaction');
    }
  }

  async renew(unit: PostgresUnit): Promise<void> {
    if (unit.ended || !unit.claimed?.length) return;
    await this.#connection.query('renew claims', this.#sql.schedules.renew, [
      unit.claimed.map((s) => s.key),
      this.#claimTimeoutMs,
      unit.owner,
    ]);
  }

  #schedule(row: ScheduleRow): Schedule {
    return decodeSchedule(row, this.#where);
  }

  async #read<R>(
    operation: string,
    text: string,
    params: unknown[],
    unit: PostgresUnit | undefined,
  ): Promise<R[]> {
    if (!unit?.writer) return (await this.#connection.idempotent<R>(operation, text, params)).rows;
    await this.#begin(unit);
    return (await this.#connection.query<R>(operation, text, params, unit.writer!.exec)).rows;
  }

  async loadSchedule(key: string, unit?: PostgresUnit): Promise<Schedule | undefined> {
    const [row] = await this.#read<ScheduleRow>('load schedule', this.#sql.schedules.load, [key], unit);
    return row ? this.#schedule(row) : undefined;
  }

  async loadEvents(aggregateId: string, unit?: PostgresUnit): Promise<Event[]> {
    const rows = await this.#read<EventFields>('load events', this.#sql.events.load, [aggregateId], unit);
    return rows.map((row) => decodeEvent(aggregateId, row, this.#where));
  }

  async listSchedules(query: ListQuery, unit?: PostgresUnit): Promise<ScheduleHead[]> {
    // Nothing is at or before an instant earlier than PostgreSQL stores.
    if (query.through && query.order !== 'key' && query.through.getTime() < PG_MIN_TIME) return [];
    const { text, params } = this.#sql.schedules.list(query);
    const rows = await this.#read<ScheduleRow>('list schedules', text, params, unit);
    if (query.select !== 'heads' && query.preview !== undefined)
      return rows.map((row) => {
        const schedule: Schedule = this.#schedule(row);
        const preview = decodePreview(
          row.dataText,
          row.dataCut,
          `${this.#where}: schedule ${JSON.stringify(row.key)}`,
        );
        if (preview) schedule.dataPreview = preview;
        return schedule;
      });
    if (query.select !== 'heads') return rows.map((row) => this.#schedule(row));
    // Numbers as numbers whatever the library's type parsers (a joined unit reads through the application's).
    return rows.map(({ key, at, dueAt, version, attempts }) => ({
      key,
      at: new Date(Number(at)),
      dueAt: new Date(Number(dueAt)),
      version: Number(version),
      attempts: Number(attempts),
    }));
  }

  async countSchedules(query: Omit<ListQuery, 'after' | 'select' | 'preview'>): Promise<number> {
    if (query.through && query.order !== 'key' && query.through.getTime() < PG_MIN_TIME) return 0;
    const { text, params } = this.#sql.schedules.count(query);
    const [row] = await this.#read<{ n: number }>('count schedules', text, params, undefined);
    return Number(row?.n ?? 0);
  }

  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    const { text, params } = this.#sql.deadLetters.list(query);
    const rows = await this.#read<DeadLetterFields & { dataText?: string | null; dataCut?: boolean | null }>(
      'list dead letters',
      text,
      params,
      undefined,
    );
    return rows.map((row) => {
      const dead = decodeDeadLetter(row, this.#where);
      const preview = decodePreview(
        row.dataText,
        row.dataCut,
        `${this.#where}: dead letter ${JSON.stringify(row.key)}`,
      );
      if (preview) dead.dataPreview = preview;
      return dead;
    });
  }

  /** How many dead letters there are (under a prefix), up to the limit: keys only, on the primary key. */
  async countDeadLetters(query: { prefix?: string; limit: number }): Promise<number> {
    const { text, params } = this.#sql.deadLetters.count(query);
    const [row] = await this.#read<{ n: number }>('count dead letters', text, params, undefined);
    return Number(row?.n ?? 0);
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    return this.#notifier.watch(listener);
  }
}

/** SQLSTATEs of a statement naming a schema, table or function the database does not have. */
const MISSING = new Set(['3F000', '42P01', '42883']);

/**
 * A joined statement that found no duetime store: the handle is a transaction of another database (or
 * of one the store was never migrated into). Refused naming the handle; undefined for any other error.
 */
function elsewhere(error: unknown, schema: string): InvalidArgumentError | undefined {
  const state = sqlStateOf(error);
  if (state === undefined || !MISSING.has(state)) return undefined;
  return new InvalidArgumentError(
    'handle',
    '(transaction handle)',
    `is a transaction on a database without the store's schema ${JSON.stringify(schema)}: a transaction of another database, or of one the store was never migrated into (${error instanceof Error ? error.message : String(error)})`,
    { cause: error },
  );
}

/** Whether a node-postgres client pipelines the statements sent to it without waiting. */
function pipelines(client: unknown): boolean {
  return (client as { pipeline?: unknown } | null | undefined)?.pipeline === true;
}
