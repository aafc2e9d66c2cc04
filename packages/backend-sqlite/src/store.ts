import { randomUUID } from 'node:crypto';
import {
  BackendError,
  type Changes,
  type Claimed,
  type ClaimRequest,
  ClosedError,
  ConflictError,
  type DeadLetterListQuery,
  type DeadLetterRecord,
  decodeDeadLetter,
  decodeEvent,
  decodePreview,
  decodeSchedule,
  type Event,
  isOneShot,
  type ListQuery,
  type Schedule,
  type ScheduleHead,
  type Settlement,
  type StoreAdapter,
  type StoredState,
  type Unit,
  type WatchEvent,
  type Write,
} from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection, WriteHold } from './connection.js';
import { mapSqliteError, sqliteCode } from './errors.js';
import { joinable } from './join.js';
import { prefixUpperBound } from './sql/prefix.js';
import type { PrefixShape } from './sql/queries.js';
import type { Tables } from './sql/tables.js';
import { Statements } from './statements.js';

/**
 * A unit of work: a `BEGIN IMMEDIATE … COMMIT` on the writer connection, holding SQLite's write lock from
 * its start (so nothing changes under it and no check needs repeating at commit). A claim that found
 * nothing due holds nothing.
 */
export interface SqliteUnit extends Unit<Database.Database> {
  readonly hold?: WriteHold;
  /** A unit joined to the application's own transaction (see {@link SqliteStore.join}). */
  readonly joined?: { db: Database.Database; statements: Statements; savepoint: string };
  readonly sql: Database.Database;
  readonly claimed?: readonly Claimed[];
}

interface ScheduleRow {
  key: string;
  at: number;
  due_at: number;
  version: number;
  attempts: number;
  message?: string;
  last_error?: string | null;
  recurrence?: string | null;
  interrupted?: number | null;
  /** `preview` reads: the data's JSON text, cut, and whether it was (0/1). */
  data_text?: string | null;
  data_cut?: number | null;
}

interface DeadLetterRow {
  key: string;
  version: number;
  at: number;
  message: string;
  attempts: number;
  error: string;
  dead_at: number;
  data_text?: string | null;
  data_cut?: number | null;
}

/**
 * The store adapter on SQLite (interactive: writes run inside the unit as core hands them over, each
 * processor's part is a savepoint, and `tx.sql` is the writer connection).
 *
 * Claims. A delivery first records its claims (`claims` table: key, version, owner, claimed until) in a
 * short transaction of its own that commits, then opens the delivery's transaction. Other processes skip
 * a version whose claim is live. When the delivery commits, the settlements and the removal of its claims
 * commit together; when the process dies instead, its transaction rolls back and its claims stay behind
 * until they lapse (`claimTimeoutMs`): the next claim of that version reports it `interrupted`. No renewal
 * is needed: while the delivery's transaction runs it holds the file's write lock, so nobody else can
 * claim anything until it ends, and its end removes the claims. The claims are checked once more after
 * the delivery's transaction began, so a claim taken over in between (it lapsed while this process waited
 * for the lock) is left to its new holder.
 */
export class SqliteStore implements StoreAdapter<Database.Database, SqliteUnit> {
  readonly #connection: SqliteConnection;
  readonly #write: Statements;
  readonly #read: Statements;
  readonly #sql: Database.Database;
  readonly #owner = randomUUID();
  readonly #claimTimeoutMs: number;
  readonly #tables: Tables;
  /** Statements prepared on connections of joined transactions. */
  readonly #joined = new WeakMap<Database.Database, Statements>();
  readonly watch: (listener: (event: WatchEvent) => void) => () => void;
  #parts = 0;

  constructor(
    connection: SqliteConnection,
    tables: Tables,
    options: { claimTimeoutMs: number; sql: Database.Database },
    watch: (listener: (event: WatchEvent) => void) => () => void,
  ) {
    this.#connection = connection;
    this.#tables = tables;
    this.#write = new Statements(connection.writer, tables);
    this.#read =
      connection.reader === connection.writer ? this.#write : new Statements(connection.reader, tables);
    this.#sql = options.sql;
    this.#claimTimeoutMs = options.claimTimeoutMs;
    this.watch = watch;
  }

  get #file(): string {
    return this.#connection.file;
  }

  async begin(claim?: ClaimRequest): Promise<SqliteUnit> {
    if (!claim) return { hold: await this.#connection.beginWrite('begin a transaction'), sql: this.#sql };
    const claimed = await this.#claim(claim);
    if (claimed.length === 0) return { sql: this.#sql, claimed };
    let hold: WriteHold;
    try {
      hold = await this.#connection.beginWrite('deliver claimed schedules');
    } catch (error) {
      await this.#release(claimed).catch(() => {});
      throw error;
    }
    const check = this.#write.get('holdsClaim');
    const held = this.#connection.within(hold, 'deliver claimed schedules', () =>
      claimed.filter((s) => check.get(s.key, this.#owner, s.version) !== undefined),
    );
    return { hold, sql: this.#sql, claimed: held };
  }

  /** Records claims on the first due versions no live claim holds, in a transaction that commits. */
  async #claim({ now, limit }: ClaimRequest): Promise<Claimed[]> {
    const at = now.getTime();
    // A look on the read connection first keeps an idle dispatcher from taking the write lock at all.
    const due = await this.#connection.read('look for due schedules', () => this.#read.get('anyDue').get(at));
    if (due === undefined) return [];
    const hold = await this.#connection.beginWrite('claim due schedules');
    let claimed: Claimed[];
    try {
      claimed = this.#connection.within(hold, 'claim due schedules', () => {
        const wall = Date.now();
        const rows = this.#write.get('claimDue').all({ now: at, wall, limit }) as ScheduleRow[];
        const put = this.#write.get('putClaim');
        for (const row of rows) put.run(row.key, row.version, this.#owner, wall + this.#claimTimeoutMs);
        return rows.map((row) => {
          const schedule: Claimed = this.#schedule(row);
          if (row.interrupted) schedule.interrupted = true;
          return schedule;
        });
      });
    } catch (error) {
      this.#connection.rollback(hold);
      throw error;
    }
    if (claimed.length === 0) this.#connection.rollback(hold);
    else this.#connection.commit(hold, 'claim due schedules');
    return claimed;
  }

  async #release(claimed: readonly Schedule[]): Promise<void> {
    if (claimed.length === 0) return;
    await this.#connection.write('release claims', () => {
      const drop = this.#write.get('dropClaim');
      for (const s of claimed) drop.run(s.key, this.#owner);
    });
  }

  /**
   * Joins the application's own transaction: `handle` is a better-sqlite3 connection to this backend's
   * database, inside a transaction the application began (`BEGIN` through the connection, Kysely's
   * `transaction()`, a Drizzle `BEGIN`). duetime's writes run on that connection under a savepoint, and
   * commit or roll back with the application's transaction.
   */
  async join(handle: unknown): Promise<SqliteUnit> {
    const db = joinable(handle, this.#connection);
    let statements = this.#joined.get(db);
    if (!statements) {
      statements = new Statements(db, this.#tables);
      this.#joined.set(db, statements);
    }
    const savepoint = `duetime_join_${++this.#parts}`;
    try {
      db.exec(`SAVEPOINT ${savepoint}`);
    } catch (error) {
      throw mapSqliteError('join a transaction', this.#file, error);
    }
    return { joined: { db, statements, savepoint }, sql: db };
  }

  async write(unit: SqliteUnit, writes: readonly Write[]): Promise<number[]> {
    return this.#within(unit, 'write', (s) => writes.map((w) => this.#apply(s, w)));
  }

  /** Statements run one at a time as they come (the driver is synchronous): processors may run at once. */
  concurrent(): boolean {
    return true;
  }

  async part<T>(unit: SqliteUnit, fn: () => Promise<T>): Promise<T> {
    const name = `duetime_part_${++this.#parts}`;
    this.#within(unit, 'start a delivery part', () => unit.sql.exec(`SAVEPOINT ${name}`));
    let result: T;
    try {
      result = await fn();
    } catch (error) {
      this.#within(unit, 'roll back a delivery part', () =>
        unit.sql.exec(`ROLLBACK TO ${name}; RELEASE ${name}`),
      );
      throw error;
    }
    this.#within(unit, 'end a delivery part', () => unit.sql.exec(`RELEASE ${name}`));
    return result;
  }

  async commit(unit: SqliteUnit, changes: Changes): Promise<void> {
    if (unit.joined) {
      const { savepoint } = unit.joined;
      this.#within(unit, 'write into the joined transaction', (s) => {
        for (const w of changes.writes) this.#apply(s, w);
        unit.sql.exec(`RELEASE ${savepoint}`);
      });
      return;
    }
    const hold = unit.hold;
    if (!hold) return;
    try {
      this.#within(unit, 'commit', (statements) => {
        for (const w of changes.writes) this.#apply(statements, w);
        const drop = statements.get('dropClaim');
        for (const s of changes.settlements) {
          this.#settle(statements, s);
          drop.run(s.schedule.key, this.#owner);
        }
      });
    } catch (error) {
      this.#connection.rollback(hold);
      await this.#release(unit.claimed ?? []).catch(() => {});
      throw error;
    }
    this.#connection.commit(hold, unit.claimed ? 'commit a delivery batch' : 'commit a transaction');
  }

  async rollback(unit: SqliteUnit): Promise<void> {
    if (unit.joined) {
      const { db, savepoint } = unit.joined;
      // The application's transaction may have ended meanwhile (its error, its rollback): nothing to undo.
      if (db.open && db.inTransaction)
        try {
          db.exec(`ROLLBACK TO ${savepoint}; RELEASE ${savepoint}`);
        } catch (error) {
          throw mapSqliteError('undo writes in the joined transaction', this.#file, error);
        }
      return;
    }
    if (unit.hold) this.#connection.rollback(unit.hold);
    try {
      await this.#release(unit.claimed ?? []);
    } catch (error) {
      // Closed meanwhile: the claims lapse by themselves.
      if (!(error instanceof ClosedError)) throw error;
    }
  }

  #settle(w: Statements, s: Settlement): void {
    const { key, version } = s.schedule;
    if (s.outcome === 'release') return;
    if (s.outcome === 'retry') {
      if (!s.failure) return;
      w.get('retry').run({
        key,
        version,
        attempts: s.failure.attempts,
        error: s.failure.error,
        dueAt: s.failure.dueAt.getTime(),
        at: s.failure.at ? s.failure.at.getTime() : null,
      });
      return;
    }
    w.get('consume').run(key, version);
    if (s.dead)
      w.get('putDeadLetter').run({
        key,
        version,
        at: s.schedule.at.getTime(),
        message: JSON.stringify(s.schedule.message),
        attempts: s.dead.attempts,
        error: s.dead.error,
        deadAt: s.dead.deadAt.getTime(),
      });
    if (s.next)
      w.get('armNext').run(
        this.#row(
          w,
          key,
          s.next.at,
          s.next.dueAt ?? s.next.at,
          JSON.stringify(s.schedule.message),
          s.next.recurrence,
        ),
      );
  }

  #row(s: Statements, key: string, at: Date, dueAt: Date, message: string, state: StoredState | undefined) {
    return {
      key,
      at: at.getTime(),
      dueAt: dueAt.getTime(),
      version: s.get('bumpVersion').pluck().get() as number,
      message,
      recurrence: state === undefined ? null : JSON.stringify(state),
      recurring: state !== undefined && !isOneShot(state) ? 1 : 0,
    };
  }

  /** Applies one write; returns how many schedules, dead letters or events it changed. */
  #apply(s: Statements, w: Write): number {
    switch (w.op) {
      case 'put': {
        if (w.ifVersion !== undefined) {
          const current = s.get('currentVersion').pluck().get(w.key) as number | undefined;
          if (current !== w.ifVersion) throw new ConflictError('version', w.key);
        }
        s.get('putSchedule').run(
          this.#row(s, w.key, w.at, w.dueAt ?? w.at, JSON.stringify(w.message), w.recurrence),
        );
        return 1;
      }
      case 'delete':
        return s.get('deleteSchedule').run(w.key).changes;
      case 'deletePrefix': {
        const hi = prefixUpperBound(w.prefix);
        return hi === undefined
          ? s.get('deleteFrom').run({ lo: w.prefix }).changes
          : s.get('deleteRange').run({ lo: w.prefix, hi }).changes;
      }
      case 'append': {
        const last = (s.get('lastSequence').pluck().get(w.aggregateId) as number | null) ?? 0;
        if (last !== w.expectedSequence) throw new ConflictError('aggregate', w.aggregateId);
        const insert = s.get('insertEvent');
        try {
          for (const e of w.events)
            insert.run(
              w.aggregateId,
              e.sequence,
              e.type,
              e.data === undefined ? null : JSON.stringify(e.data),
              e.timestamp,
            );
        } catch (error) {
          if (sqliteCode(error)?.startsWith('SQLITE_CONSTRAINT'))
            throw new ConflictError('aggregate', w.aggregateId, undefined, { cause: error });
          throw error;
        }
        return w.events.length;
      }
      case 'deleteDead':
        return s.get('deleteDeadLetter').run(w.key).changes;
    }
  }

  /** Runs `fn` inside the unit's transaction (it must hold one, or have joined one). */
  #within<T>(unit: SqliteUnit, operation: string, fn: (statements: Statements) => T): T {
    if (unit.joined) {
      const { db, statements } = unit.joined;
      if (this.#connection.closed) throw new ClosedError(`sqlite backend on ${this.#file}`);
      if (!db.open || !db.inTransaction)
        throw new BackendError(
          `${operation} (${this.#file})`,
          'the joined transaction ended (committed, rolled back or closed) before duetime finished its writes',
        );
      try {
        return fn(statements);
      } catch (error) {
        throw mapSqliteError(operation, this.#file, error);
      }
    }
    if (!unit.hold) throw new ClosedError(`transaction on ${this.#file} (it holds nothing)`);
    return this.#connection.within(unit.hold, operation, () => fn(this.#write));
  }

  /** Runs a read inside `unit` when it holds a transaction, else on committed data. */
  #reading<T>(unit: SqliteUnit | undefined, operation: string, fn: (s: Statements) => T): Promise<T> {
    if (unit?.hold || unit?.joined) return Promise.resolve().then(() => this.#within(unit, operation, fn));
    return this.#connection.read(operation, () => fn(this.#read));
  }

  #schedule(row: ScheduleRow): Schedule {
    return decodeSchedule(
      {
        key: row.key,
        at: row.at,
        dueAt: row.due_at,
        version: row.version,
        attempts: row.attempts,
        message: row.message,
        lastError: row.last_error,
        recurrence: row.recurrence,
      },
      this.#file,
    );
  }

  loadSchedule(key: string, unit?: SqliteUnit): Promise<Schedule | undefined> {
    return this.#reading(unit, 'load a schedule', (s) => {
      const row = s.get('loadSchedule').get(key) as ScheduleRow | undefined;
      return row ? this.#schedule(row) : undefined;
    });
  }

  loadEvents(aggregateId: string, unit?: SqliteUnit): Promise<Event[]> {
    return this.#reading(unit, 'load events', (s) =>
      (
        s.get('loadEvents').all(aggregateId) as {
          sequence: number;
          type: string;
          data: string | null;
          timestamp: number;
        }[]
      ).map((row) => decodeEvent(aggregateId, row, this.#file)),
    );
  }

  listSchedules(query: ListQuery, unit?: SqliteUnit): Promise<ScheduleHead[]> {
    return this.#reading(unit, 'list schedules', (s) => {
      const select = query.select === 'heads' ? 'heads' : query.preview !== undefined ? 'preview' : 'all';
      const { statement, params } = this.#listing(s, query, select);
      if (select === 'preview') params.preview = query.preview;
      const rows = statement.all(params) as ScheduleRow[];
      return rows.map((row) => {
        if (select === 'heads')
          return {
            key: row.key,
            at: new Date(row.at),
            dueAt: new Date(row.due_at),
            version: row.version,
            attempts: row.attempts,
          };
        const schedule = this.#schedule(row);
        const preview = decodePreview(
          row.data_text,
          row.data_cut,
          `${this.#file}: schedule ${JSON.stringify(row.key)}`,
        );
        if (preview) schedule.dataPreview = preview;
        return schedule;
      });
    });
  }

  /**
   * How many schedules `query` matches, up to its limit: `count(*)` over the listing's walk of the order's
   * index (`LIMIT`), which reads no message unless `recurring` filters on the row.
   */
  countSchedules(query: Omit<ListQuery, 'after' | 'select' | 'preview'>): Promise<number> {
    return this.#reading(undefined, 'count schedules', (s) => {
      const { statement, params } = this.#listing(s, query, 'count');
      return Number((statement.get(params) as { n: number }).n);
    });
  }

  /** The listing statement of `query`'s shape and its parameters. */
  #listing(
    s: Statements,
    query: Omit<ListQuery, 'select' | 'preview'>,
    select: 'all' | 'heads' | 'preview' | 'count',
  ): { statement: Database.Statement; params: Record<string, unknown> } {
    const params: Record<string, unknown> = { limit: query.limit };
    const prefix = prefixRange(query.prefix, params);
    if (query.through !== undefined) params.through = query.through.getTime();
    if (query.after !== undefined) {
      params.afterAt = query.after.at;
      params.afterKey = query.after.key;
    }
    if (query.recurring !== undefined) params.recurring = query.recurring ? 1 : 0;
    const statement = s.list({
      order: query.order,
      through: query.through !== undefined && query.order !== 'key',
      prefix,
      after: query.after !== undefined,
      recurring: query.recurring !== undefined,
      select,
    });
    if (query.order === 'key') {
      delete params.through;
      delete params.afterAt;
    }
    return { statement, params };
  }

  listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    return this.#connection.read('list dead letters', () => {
      const params: Record<string, unknown> = { limit: query.limit };
      const prefix = prefixRange(query.prefix, params);
      if (query.after !== undefined) params.after = query.after;
      const select = query.preview !== undefined ? 'preview' : 'all';
      if (query.preview !== undefined) params.preview = query.preview;
      const statement = this.#read.deadLetterList({ prefix, after: query.after !== undefined, select });
      return (statement.all(params) as DeadLetterRow[]).map((row) => {
        const dead = decodeDeadLetter({ ...row, deadAt: row.dead_at }, this.#file);
        const preview = decodePreview(
          row.data_text,
          row.data_cut,
          `${this.#file}: dead letter ${JSON.stringify(row.key)}`,
        );
        if (preview) dead.dataPreview = preview;
        return dead;
      });
    });
  }

  /** How many dead letters there are (under a prefix), up to the limit: keys only, on the key's index. */
  countDeadLetters(query: { prefix?: string; limit: number }): Promise<number> {
    return this.#connection.read('count dead letters', () => {
      const params: Record<string, unknown> = { limit: query.limit };
      const prefix = prefixRange(query.prefix, params);
      const statement = this.#read.deadLetterList({ prefix, after: false, select: 'count' });
      return Number((statement.get(params) as { n: number }).n);
    });
  }
}

/**
 * How a literal key prefix is searched: as the index range [prefix, upper bound) when there is one, else
 * from the prefix on with a `substr` check (a prefix of only U+10FFFF characters). Sets `lo`/`hi` in `params`.
 */
function prefixRange(prefix: string | undefined, params: Record<string, unknown>): PrefixShape {
  if (prefix === undefined || prefix === '') return 'none';
  params.lo = prefix;
  const hi = prefixUpperBound(prefix);
  if (hi === undefined) return 'from';
  params.hi = hi;
  return 'range';
}
