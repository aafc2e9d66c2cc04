import { EventEmitter } from 'node:events';
import { InvalidArgumentError, transactionControl } from '@duetime/core';
import pg from 'pg';
import { quoteIdent } from './sql/ident.js';

// PGlite (PostgreSQL compiled to WebAssembly, in the application's own process) has one session: one
// transaction at a time, which its `transaction()` serialises, and statements outside a transaction that
// wait for the one running. The backend is written for a pool of node-postgres connections; here a pool
// and its clients stand over that one session: a client's BEGIN opens a PGlite transaction (waiting for
// any other to end), its statements run in it, its COMMIT or ROLLBACK ends it; statements outside one go
// to PGlite directly. Results are given node-postgres's shape and parsing (`types.getTypeParser`, by
// default pg's own), so `tx.sql` in a processor reads as it does on a server.

/** What a PGlite database and its transactions both run statements with. */
interface PGliteStatements {
  query<T = Record<string, unknown>>(
    text: string,
    params?: unknown[],
    options?: PGliteQueryOptions,
  ): Promise<PGliteResults<T>>;
  exec(text: string, options?: PGliteQueryOptions): Promise<PGliteResults[]>;
}

/** The part of a PGlite database (`@electric-sql/pglite`, 0.2 and later) the backend uses. */
export interface PGliteLike extends PGliteStatements {
  transaction<T>(fn: (tx: PGliteTransactionLike) => Promise<T>): Promise<T>;
  onNotification(callback: (channel: string, payload: string) => void): () => void;
  /** The parsers of the instance, array types included (read for the types a result may hold). */
  readonly parsers?: Record<number, unknown>;
  readonly dataDir?: string;
  readonly closed?: boolean;
}

/** A transaction of PGlite's `transaction(async (tx) => …)`. */
export interface PGliteTransactionLike extends PGliteStatements {
  rollback(): Promise<void>;
  readonly closed: boolean;
}

interface PGliteQueryOptions {
  rowMode?: 'object' | 'array';
  parsers?: Record<number, (value: string, typeId: number) => unknown>;
}

interface PGliteResults<T = Record<string, unknown>> {
  rows: T[];
  fields: { name: string; dataTypeID: number }[];
  affectedRows?: number;
}

/** node-postgres's result, as far as the backend and `tx.sql` readers use it. */
interface PgResult {
  rows: unknown[];
  rowCount: number;
  fields: { name: string; dataTypeID: number }[];
  command: string;
}

/** Whether `value` looks like a PGlite database (not one of its transactions). */
export function isPGlite(value: unknown): value is PGliteLike {
  const db = value as Record<string, unknown> | null;
  return (
    ['query', 'exec', 'transaction', 'onNotification'].every((m) => typeof db?.[m] === 'function') &&
    typeof db?.rollback !== 'function'
  );
}

/** The types PGlite parses itself (its defaults); array types come from the instance's `parsers`. */
const PGLITE_PARSED = [16, 17, 20, 21, 23, 25, 26, 114, 700, 701, 1042, 1043, 1082, 1114, 1184, 1700, 3802];

type GetTypeParser = (oid: number, format?: string) => (value: string) => unknown;

/**
 * PGlite `parsers` that read each type PGlite would parse as `getTypeParser` says: node-postgres's
 * parsing on PGlite. Types outside the list arrive as text, as they do from node-postgres by default.
 */
class Parsers {
  readonly #db: PGliteLike;
  readonly #made = new WeakMap<GetTypeParser, Record<number, (value: string) => unknown>>();

  constructor(db: PGliteLike) {
    this.#db = db;
  }

  for(getTypeParser: GetTypeParser): Record<number, (value: string) => unknown> {
    let parsers = this.#made.get(getTypeParser);
    if (!parsers) {
      parsers = {};
      // Read when first needed: PGlite adds its array types' parsers once it is ready.
      const oids = new Set([...PGLITE_PARSED, ...Object.keys(this.#db.parsers ?? {}).map(Number)]);
      for (const oid of oids) {
        const parse = getTypeParser(oid, 'text');
        parsers[oid] = (value) => parse(value);
      }
      this.#made.set(getTypeParser, parsers);
    }
    return parsers;
  }
}

/** A statement as node-postgres takes it: text and values, or a query config. */
function statementOf(args: unknown[]): {
  text: string;
  values: unknown[] | undefined;
  rowMode: 'array' | undefined;
  getTypeParser: GetTypeParser | undefined;
} {
  const [first, second] = args;
  if (typeof first === 'string')
    return {
      text: first,
      values: Array.isArray(second) ? second : undefined,
      rowMode: undefined,
      getTypeParser: undefined,
    };
  const config = first as
    | { text?: unknown; values?: unknown; rowMode?: unknown; types?: { getTypeParser?: unknown } }
    | undefined;
  if (typeof config?.text !== 'string')
    throw new InvalidArgumentError('query', first, 'must be SQL text or a query config { text, values }');
  return {
    text: config.text,
    values: Array.isArray(config.values) ? config.values : Array.isArray(second) ? second : undefined,
    rowMode: config.rowMode === 'array' ? 'array' : undefined,
    getTypeParser:
      typeof config.types?.getTypeParser === 'function'
        ? (config.types.getTypeParser as GetTypeParser)
        : undefined,
  };
}

/** What a statement says it did, as node-postgres's `command` (its first word). */
function commandOf(text: string): string {
  return /^\s*(?:--[^\n]*\n\s*)*([A-Za-z]+)/.exec(text)?.[1]?.toUpperCase() ?? '';
}

/** A value as node-postgres sends it: dates as instants, other objects as JSON; arrays element by element. */
function sendable(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  if (Array.isArray(value)) return value.map(sendable);
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object' && !(value instanceof Uint8Array)) return JSON.stringify(value);
  return value;
}

/**
 * The pool over one PGlite database. `connect()` hands out a client of its own each time (no connection
 * is opened); `query` runs one statement outside any transaction, after the transaction running, if any.
 */
export class PglitePool extends EventEmitter {
  readonly #db: PGliteLike;
  /** What `pool.options` says: no node-postgres connection options. */
  readonly options = { pglite: true };
  readonly totalCount = 0;
  readonly #parsers: Parsers;

  constructor(db: PGliteLike) {
    super();
    this.#db = db;
    this.#parsers = new Parsers(db);
  }

  async connect(): Promise<PgliteClient> {
    return new PgliteClient(this.#db, this.#parsers);
  }

  query(...args: unknown[]): Promise<PgResult> | undefined {
    return answer(args, (statement) => run(this.#db, statement, this.#parsers));
  }

  /** The application owns the database: nothing to close here. */
  async end(): Promise<void> {}
}

/**
 * Runs `send` on the statement of node-postgres's `query` arguments and answers as node-postgres does: a
 * promise, or (a callback last, as Knex passes one) through the callback.
 */
function answer(
  args: unknown[],
  send: (statement: ReturnType<typeof statementOf>) => Promise<PgResult>,
): Promise<PgResult> | undefined {
  const callback =
    typeof args.at(-1) === 'function' ? (args.pop() as (e: unknown, r?: PgResult) => void) : undefined;
  let result: Promise<PgResult>;
  try {
    result = send(statementOf(args));
  } catch (error) {
    result = Promise.reject(error);
  }
  if (!callback) return result;
  result.then(
    (value) => callback(null, value),
    (error: unknown) => callback(error),
  );
  return undefined;
}

/** Runs one statement (or, without values, several) on `on`, read as node-postgres would. */
async function run(
  on: PGliteStatements,
  statement: ReturnType<typeof statementOf>,
  parsers: Parsers,
): Promise<PgResult> {
  const options: PGliteQueryOptions = {
    parsers: parsers.for(statement.getTypeParser ?? (pg.types.getTypeParser as GetTypeParser)),
    ...(statement.rowMode ? { rowMode: statement.rowMode } : {}),
  };
  // The simple protocol (several statements allowed) when there are no values, as node-postgres does.
  const result =
    statement.values === undefined || statement.values.length === 0
      ? ((await on.exec(statement.text, options)).at(-1) ?? { rows: [], fields: [] })
      : await on.query(statement.text, statement.values.map(sendable), options);
  return {
    rows: result.rows,
    // PGlite counts the rows a statement changed; node-postgres also those a SELECT returned.
    rowCount: Math.max(result.affectedRows ?? 0, result.rows.length),
    fields: result.fields,
    command: commandOf(statement.text),
  };
}

/**
 * A client over the PGlite session: outside a transaction, like the pool; after `BEGIN`, inside a PGlite
 * transaction of its own until `COMMIT` or `ROLLBACK`. `getTransactionStatus()` answers as node-postgres's
 * does (`I`, `T`, `E` after a failed statement). Releasing it with a transaction still open rolls that back.
 */
export class PgliteClient extends EventEmitter {
  readonly #db: PGliteLike;
  readonly #parsers: Parsers;
  #tx: PGliteTransactionLike | undefined;
  #end: ((rollback: boolean) => void) | undefined;
  #done: Promise<unknown> | undefined;
  #status: 'I' | 'T' | 'E' = 'I';
  /** Statements in order, as a connection runs them. */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(db: PGliteLike, parsers: Parsers) {
    super();
    this.#db = db;
    this.#parsers = parsers;
  }

  getTransactionStatus(): 'I' | 'T' | 'E' {
    return this.#status;
  }

  query(...args: unknown[]): Promise<PgResult> | undefined {
    return answer(args, (statement) => {
      const next = this.#queue.then(() => this.#run(statement));
      this.#queue = next.catch(() => {});
      return next;
    });
  }

  async #run(statement: ReturnType<typeof statementOf>): Promise<PgResult> {
    const verb = transactionControl(statement.text);
    const command = (name: string): PgResult => ({ rows: [], rowCount: 0, fields: [], command: name });
    if (verb === 'BEGIN' || verb === 'START TRANSACTION') {
      if (this.#tx) return command('BEGIN'); // PostgreSQL warns and goes on
      await this.#begin();
      // What follows BEGIN in the same text (`BEGIN; SET LOCAL …`) runs in the transaction.
      const rest = statement.text.replace(/^[^;]*;?/, '');
      if (rest.trim()) await this.#inside({ ...statement, text: rest });
      return command('BEGIN');
    }
    if (verb === 'COMMIT' || verb === 'END') {
      if (!this.#tx) return command('COMMIT');
      const failed = this.#status === 'E';
      await this.#finish(failed);
      return command(failed ? 'ROLLBACK' : 'COMMIT');
    }
    if (verb === 'ROLLBACK' || verb === 'ABORT') {
      if (this.#tx) await this.#finish(true);
      return command('ROLLBACK');
    }
    if (verb !== undefined)
      throw new InvalidArgumentError('statement', statement.text, `${verb} is not supported on PGlite`);
    return this.#tx ? this.#inside(statement) : run(this.#db, statement, this.#parsers);
  }

  async #inside(statement: ReturnType<typeof statementOf>): Promise<PgResult> {
    const tx = this.#tx!;
    try {
      const result = await run(tx, statement, this.#parsers);
      // A savepoint rolled back to makes a failed transaction usable again.
      if (/^\s*rollback\s+(?:work\s+|transaction\s+)?to\b/i.test(statement.text)) this.#status = 'T';
      return result;
    } catch (error) {
      this.#status = 'E';
      throw error;
    }
  }

  #begin(): Promise<void> {
    return new Promise<void>((began, failed) => {
      let entered = false;
      const done = this.#db.transaction(
        (tx) =>
          new Promise<void>((resolve, reject) => {
            entered = true;
            this.#tx = tx;
            this.#status = 'T';
            this.#end = (rollback) =>
              rollback
                ? tx.rollback().then(resolve, reject)
                : // A transaction PostgreSQL aborted is rolled back by COMMIT, without an error.
                  resolve();
            began();
          }),
      );
      this.#done = done;
      // Failing to begin fails the BEGIN; failing to end is the COMMIT's or ROLLBACK's (#finish awaits it).
      done.catch((error: unknown) => {
        if (!entered) failed(error);
      });
    });
  }

  async #finish(rollback: boolean): Promise<void> {
    const end = this.#end!;
    const done = this.#done!;
    this.#tx = undefined;
    this.#end = undefined;
    this.#done = undefined;
    this.#status = 'I';
    end(rollback);
    await done;
  }

  /** Back to the pool: nothing to give back but the transaction, rolled back if still open. */
  release(): void {
    this.#queue = this.#queue.then(() => (this.#tx ? this.#finish(true).catch(() => {}) : undefined));
  }
}

/**
 * The LISTEN connection over PGlite: `LISTEN` subscribes to PGlite's notifications, which PGlite
 * delivers when a transaction that notified commits, as a server does.
 */
export class PgliteListenClient extends EventEmitter {
  readonly #db: PGliteLike;
  #channel: string | undefined;
  #unsubscribe: (() => void) | undefined;

  constructor(db: PGliteLike) {
    super();
    this.#db = db;
  }

  async connect(): Promise<void> {
    if (this.#db.closed) throw new Error('the PGlite database is closed');
  }

  async query(text: string): Promise<void> {
    const channel = /^LISTEN\s+"((?:[^"]|"")+)"$/.exec(text)?.[1]?.replace(/""/g, '"');
    if (channel === undefined)
      throw new InvalidArgumentError('statement', text, 'is not a LISTEN the PGlite connection runs');
    this.#channel = channel;
    this.#unsubscribe = this.#db.onNotification((name, payload) => {
      if (name === channel) this.emit('notification', { channel: name, payload, processId: 0 });
    });
    await this.#db.exec(`LISTEN ${quoteIdent(channel)}`);
  }

  async end(): Promise<void> {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    if (this.#channel !== undefined && !this.#db.closed)
      await this.#db.exec(`UNLISTEN ${quoteIdent(this.#channel)}`).catch(() => {});
    this.#channel = undefined;
  }
}
