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
  refuseTransactionControl,
  type Schedule,
  type ScheduleHead,
  type StoreAdapter,
  systemClock,
  type Unit,
  type WatchEvent,
  type Write,
} from '@duetime/core';
import type pg from 'pg';
import type { CheckedOutClient, Connection, PostgresExecutor } from './connection.js';
import { sqlState } from './errors.js';
import type { ChangeNotifier } from './notifications.js';
import { deadLetterSql } from './sql/dead-letters.js';
import { eventSql } from './sql/events.js';
import { quoteIdent } from './sql/ident.js';
import { type ScheduleRow, scheduleSql } from './sql/schedules.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';
import { type Statements, Writer } from './writes.js';

/**
 * Every transaction starts at READ COMMITTED whatever the server's default, because that is the level
 * duetime's statements are written for; the application may still raise it with
 * `SET TRANSACTION ISOLATION LEVEL …` as the first statement on `tx.sql`.
 */
const BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';
const PART = 'duetime_part';
const JOIN = 'duetime_join';
/** SQLSTATE of a statement sent in an aborted transaction, and of a savepoint outside any. */
const IN_FAILED_TRANSACTION = '25P02';
const NO_TRANSACTION = '25P01';
const ABORTED =
  'a statement inside the part failed (an error caught inside the processor) and aborted the transaction';

/** A unit of work: a transaction on a connection of its own (or the application's), and its claims. */
export interface PostgresUnit extends Unit<pg.PoolClient> {
  readonly sql?: pg.PoolClient;
  readonly claimed?: readonly Claimed[];
  /** Who holds the claims (`claim_owner`). */
  readonly owner: string;
  /** The connection checked out for this unit (none for a joined one, or a claim that found nothing). */
  readonly out?: CheckedOutClient;
  /** The connection the unit's statements go to. */
  readonly client?: pg.ClientBase;
  readonly writer?: Writer;
  /** A unit on the application's transaction (`join`): ends with a savepoint, never with COMMIT. */
  readonly joined: boolean;
  /** A joined unit's executor: every statement, transaction control included, goes through it. */
  readonly exec?: PostgresExecutor;
  /** Whether BEGIN went out (it waits for the first statement, so a transaction that only puts is one). */
  begun: boolean;
  /**
   * A joined unit: whether its savepoint went out. It waits for the first statement, and a join whose
   * writes are one statement takes none (see `commit`).
   */
  saved: boolean;
  /**
   * The processor part running now, when parts take their savepoint lazily (a client that reports its
   * transaction status): `saved` once its savepoint went out, ahead of its first statement.
   */
  part?: { saved: boolean };
  /** Whether a savepoint of an earlier part is still open: the next part's releases it, or COMMIT does. */
  held?: boolean;
  /** A failure of BEGIN queued ahead of the application's statements, reported by the commit. */
  failure?: unknown;
  ended: boolean;
}

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
  readonly #where: string;
  readonly #claimTimeoutMs: number;
  readonly renewEveryMs: number;

  readonly #join: { clock: Clock; joinNotifyWithinMs: number };

  constructor(
    connection: Connection,
    notifier: ChangeNotifier,
    claimTimeoutMs: number,
    join: { clock: Clock; joinNotifyWithinMs: number } = { clock: systemClock, joinNotifyWithinMs: 30_000 },
  ) {
    this.#join = join;
    this.#connection = connection;
    this.#notifier = notifier;
    const s = quoteIdent(connection.target.schema);
    this.#sql = { schedules: scheduleSql(s), events: eventSql(s), deadLetters: deadLetterSql(s) };
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
    let out: CheckedOutClient;
    try {
      out = await this.#connection.checkout('begin transaction');
    } catch (error) {
      if (claimed) await this.#release(claimed, owner);
      throw error;
    }
    const unit = this.#unit(out.client, { owner, out, joined: false, ...(claimed ? { claimed } : {}) });
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
    const unit: PostgresUnit = {
      ...fields,
      client,
      writer: new Writer(this.#connection, this.#sql, fields.exec ?? this.#connection.executor(client)),
      begun: fields.joined,
      saved: false,
      ended: false,
      sql: guardSql(client, () => {
        if (unit.part) {
          if (!unit.part.saved)
            this.#partSavepoint(unit).catch((error: unknown) => {
              unit.failure ??= error;
            });
          return;
        }
        if (unit.joined && !unit.saved) {
          // The application's own statements through tx.sql are undone with duetime's when fn throws.
          unit.saved = true;
          Promise.resolve(unit.writer!.exec.query(`SAVEPOINT ${JOIN}`, [])).catch((error: unknown) => {
            unit.failure ??= error;
          });
          return;
        }
        if (unit.begun) return;
        unit.begun = true;
        client.query(BEGIN).catch((error: unknown) => {
          unit.failure ??= error;
        });
      }) as pg.PoolClient,
    };
    return unit;
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
      await this.#control(unit, 'begin transaction', BEGIN);
    }
    if (unit.part && !unit.part.saved) {
      try {
        await this.#partSavepoint(unit);
      } catch (error) {
        throw this.#connection.error(error, 'start a delivery part');
      }
    }
  }

  /**
   * Takes the running part's savepoint, releasing an earlier part's in the same round trip (one simple
   * query). Sent at once, so it goes out ahead of the statement that asked for it.
   */
  #partSavepoint(unit: PostgresUnit): Promise<unknown> {
    unit.part!.saved = true;
    const text = unit.held ? `RELEASE SAVEPOINT ${PART}; SAVEPOINT ${PART}` : `SAVEPOINT ${PART}`;
    unit.held = true;
    return unit.client!.query(text);
  }

  /** Sends transaction control (several statements: the simple protocol, no parameters). */
  async #control(unit: PostgresUnit, operation: string, text: string): Promise<pg.QueryResult> {
    this.#connection.check();
    if (unit.exec) {
      // An executor runs one statement at a time.
      const exec = unit.exec;
      let last: pg.QueryResult | undefined;
      for (const statement of text.split('; '))
        last = (await this.#connection.query(operation, statement, [], exec)) as unknown as pg.QueryResult;
      return last!;
    }
    try {
      const result = (await unit.client!.query(text)) as pg.QueryResult | pg.QueryResult[];
      return Array.isArray(result) ? result[result.length - 1]! : result;
    } catch (error) {
      throw this.#connection.error(error, operation);
    }
  }

  async write(unit: PostgresUnit, writes: readonly Write[]): Promise<number[]> {
    await this.#begin(unit);
    return unit.writer!.apply(writes);
  }

  /**
   * Runs one processor under a savepoint. On a client that reports its transaction status (node-postgres
   * 8.21 and later) the savepoint waits for the part's first statement, a part that sends none takes
   * none, and a part that ends well is not released on its own: the next part's savepoint releases it
   * in the same round trip, or COMMIT does. Whether it ended well is the client's status, `T`, read
   * without a round trip when the client is settled; otherwise (a failed statement whose error the
   * processor caught, a statement still in flight) the savepoint is released as before, and a failed
   * part rolled back to it.
   */
  async part<T>(unit: PostgresUnit, fn: () => Promise<T>): Promise<T> {
    await this.#begin(unit);
    const status = transactionStatus(unit.client);
    if (status === undefined) return this.#eagerPart(unit, fn);
    const part = { saved: false };
    unit.part = part;
    let result: T;
    try {
      result = await fn();
    } catch (error) {
      unit.part = undefined;
      if (part.saved) await this.#undoPart(unit);
      throw error;
    }
    unit.part = undefined;
    if (!part.saved) return result;
    // Known good only when the client has its answer to every statement (the status comes with the
    // server's ready message, which may arrive after an error the processor already caught): otherwise
    // the savepoint is released the old way, whose failure tells.
    if (settledStatus(unit.client) === 'T') return result;
    unit.held = false;
    await this.#releasePart(unit);
    return result;
  }

  /** Releases the part's savepoint; a part whose statement failed is rolled back to it and refused. */
  async #releasePart(unit: PostgresUnit): Promise<void> {
    try {
      await unit.client!.query(`RELEASE SAVEPOINT ${PART}`);
    } catch (error) {
      if (sqlState(error) !== IN_FAILED_TRANSACTION)
        throw this.#connection.error(error, 'end a delivery part');
      await this.#undoPart(unit);
      throw new BackendError('end a delivery part', ABORTED, { cause: error });
    }
  }

  async #undoPart(unit: PostgresUnit): Promise<void> {
    unit.held = false;
    await this.#control(
      unit,
      'undo a delivery part',
      `ROLLBACK TO SAVEPOINT ${PART}; RELEASE SAVEPOINT ${PART}`,
    );
  }

  /** A part on a client that cannot report its transaction status: a savepoint taken and released around it. */
  async #eagerPart<T>(unit: PostgresUnit, fn: () => Promise<T>): Promise<T> {
    await this.#control(unit, 'start a delivery part', `SAVEPOINT ${PART}`);
    let result: T;
    try {
      result = await fn();
    } catch (error) {
      await this.#undoPart(unit);
      throw error;
    }
    await this.#releasePart(unit);
    return result;
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
      const result = await this.#control(unit, operation, 'COMMIT');
      unit.ended = true;
      unit.out!.release(false);
      // PostgreSQL answers COMMIT of a transaction already aborted by an error (one the application caught
      // and swallowed) with ROLLBACK, not with an error.
      if (result.command === 'ROLLBACK')
        throw new BackendError(
          operation,
          'the transaction had failed on an earlier statement (an error caught inside it) and was rolled back',
        );
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
        await this.#control(
          unit,
          'undo the joined writes',
          `ROLLBACK TO SAVEPOINT ${JOIN}; RELEASE SAVEPOINT ${JOIN}`,
        );
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
    const exec: PostgresExecutor = {
      query: async (text, params) => {
        const result = (await client.query(text, [...(params ?? [])])) as {
          rows?: unknown[];
          rowCount?: number | null;
        };
        const rows = (Array.isArray(result?.rows) ? result.rows : []) as never[];
        return { rows, rowCount: result?.rowCount ?? rows.length };
      },
    };
    const status = transactionStatus(handle);
    if (status === 'I' || status === 'E')
      throw refusal(status === 'I' ? NO_TRANSACTION : IN_FAILED_TRANSACTION);
    const unit = this.#unit(client, { owner: randomBytes(8).toString('hex'), joined: true, exec });
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
    if (!unit?.client) return (await this.#connection.idempotent<R>(operation, text, params)).rows;
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

/**
 * `tx.sql`: the unit's pg client, whose `query` refuses transaction control (BEGIN, COMMIT, ROLLBACK, …:
 * they would end duetime's transaction under it) and queues the unit's BEGIN ahead of the first
 * statement. Everything else is the client's own.
 */
function guardSql(client: pg.ClientBase, beforeQuery: () => void): pg.ClientBase {
  const query = (...args: unknown[]) => {
    const first = args[0] as string | { text?: unknown } | undefined;
    const text = typeof first === 'string' ? first : first?.text;
    try {
      if (typeof text === 'string') refuseTransactionControl(text);
    } catch (error) {
      // Reported the way pg reports a failed query: to the callback, or as a rejected promise.
      const callback = args.at(-1);
      if (typeof callback !== 'function') return Promise.reject(error);
      queueMicrotask(() => (callback as (error: unknown) => void)(error));
      return undefined;
    }
    beforeQuery();
    return (client.query as (...a: unknown[]) => unknown)(...args);
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** Whether the changes are at most one statement: puts of distinct keys, no settlements. */
function oneStatement(changes: Changes): boolean {
  if (changes.settlements.length > 0) return false;
  const steps = Writer.plan(changes.writes);
  return steps.length === 0 || (steps.length === 1 && 'keys' in steps[0]!);
}

/**
 * A joined handle's transaction state, known without a round trip: `T` inside a transaction, `I` outside
 * any, `E` in a failed one; undefined when the handle cannot tell. An executor tells through
 * `inTransaction()`; a node-postgres client through `getTransactionStatus()` (pg 8.12 and later).
 */
function transactionStatus(handle: unknown): 'T' | 'I' | 'E' | undefined {
  const h = handle as { inTransaction?: unknown; getTransactionStatus?: unknown };
  if (typeof h.inTransaction === 'function') {
    const inside = (h.inTransaction as () => unknown).call(handle);
    return inside === true ? 'T' : inside === false ? 'I' : undefined;
  }
  if (typeof h.getTransactionStatus === 'function') {
    const status = (h.getTransactionStatus as () => unknown).call(handle);
    return status === 'T' || status === 'I' || status === 'E' ? status : undefined;
  }
  return undefined;
}

/**
 * A node-postgres client's transaction status when it is settled: the client has the server's ready
 * message for its last statement and nothing in flight (`readyForQuery`); undefined otherwise.
 */
function settledStatus(client: pg.ClientBase | undefined): string | undefined {
  if ((client as { readyForQuery?: unknown } | undefined)?.readyForQuery !== true) return undefined;
  return transactionStatus(client);
}

function refusal(state: string): InvalidArgumentError {
  return new InvalidArgumentError(
    'handle',
    '(transaction handle)',
    state === NO_TRANSACTION
      ? 'is not inside a transaction: begin one first (send BEGIN on a pg client)'
      : 'is inside a transaction that failed on an earlier statement',
  );
}

/**
 * The SQLSTATE of an error as the application's library reports it: node-postgres and postgres.js keep
 * it as `code`; TypeORM and Knex wrap the driver's error (`driverError`, `cause`).
 */
function sqlStateOf(error: unknown): string | undefined {
  for (let e = error as Record<string, unknown> | undefined, depth = 0; e && depth < 4; depth++) {
    const state = sqlState(e) ?? e.code;
    if (typeof state === 'string' && /^[0-9A-Z]{5}$/.test(state)) return state;
    e = (e.driverError ?? e.cause ?? e.originalError) as Record<string, unknown> | undefined;
  }
  return undefined;
}
