import { InvalidArgumentError, type SqlExecutor, type SqlResult } from '@duetime/core';

export type { SqlExecutor, SqlResult };

/**
 * Refuses a handle that is not what a binding expects, before anything is written: an
 * `InvalidArgumentError` naming the argument (`handle`) and what was expected.
 */
export function refuse(handle: unknown, expected: string, field = 'handle'): never {
  throw new InvalidArgumentError(field, describe(handle), `must be ${expected}`);
}

/** What the processor direction (`toDrizzle`, `toKysely`, …) expects, in its refusals. */
const DELIVERY_CLIENT = "the delivery transaction's client (tx.sql on the PostgreSQL backend)";

/**
 * The delivery transaction's node-postgres client (`tx.sql` in a processor on the PostgreSQL backend),
 * refused with an `InvalidArgumentError` naming `handle` when it is not a client.
 */
export function deliveryClient<T>(client: T): T {
  if (typeof (client as { query?: unknown } | null)?.query !== 'function') refuse(client, DELIVERY_CLIENT);
  // A pool runs each statement on whichever connection is free, outside the delivery's transaction.
  if (typeof (client as { totalCount?: unknown }).totalCount === 'number')
    refuse(client, `${DELIVERY_CLIENT}, not a pg.Pool`);
  return client;
}

/**
 * The delivery's client as a pool's checked-out connection: every query runs on it, and `release()` gives
 * nothing back to any pool (duetime ends the transaction and returns the client). For libraries that
 * check a connection out of a pool for each query (Kysely, Prisma's pg adapter).
 */
export function pinned<T extends object>(client: T): T & { release(): void } {
  return overriding(client, { release() {} });
}

/**
 * `client` with some members replaced. A proxy, not a derived object: the client's other methods run on
 * the client itself, whose state they change.
 */
export function overriding<T extends object, O extends object>(client: T, members: O): T & O {
  return new Proxy(client, {
    get(target, property) {
      if (Object.hasOwn(members, property)) return (members as Record<PropertyKey, unknown>)[property];
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  }) as T & O;
}

const made = new WeakMap<object, Map<unknown, unknown>>();

/**
 * What `make` made for this delivery client and `key` (a library's options, a factory), made once while
 * the client's transaction lasts: the messages of a batch share one transaction, and so what is made on
 * its client. For libraries whose instances cost more than the query they run (Knex, Prisma).
 */
export function onceFor<T>(client: object, key: unknown, make: () => T): T {
  const byKey = made.get(client) ?? new Map<unknown, unknown>();
  made.set(client, byKey);
  if (!byKey.has(key)) byKey.set(key, make());
  return byKey.get(key) as T;
}

/** A short description of a value for an error message (never the whole object). */
function describe(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== 'Object' ? `a ${name}` : 'an object';
}

/**
 * Whether a node-postgres client is inside an open transaction, from the status its last ready message
 * carried (`getTransactionStatus()`, pg 8.21 and later): `T` yes; `I` (idle) or `E` (failed) no; undefined
 * when the client cannot tell (an older pg, pg-native, another driver).
 */
export function pgInTransaction(client: unknown): boolean | undefined {
  const status = (client as { getTransactionStatus?: () => unknown } | null)?.getTransactionStatus?.();
  return status === 'T' ? true : status === 'I' || status === 'E' ? false : undefined;
}

/**
 * Runs a statement straight on a driver's client inside a transaction: a node-postgres client (`query`
 * with `getTransactionStatus`) or a postgres.js transaction `sql` (`unsafe`). Undefined for anything
 * else. Bindings over a query builder use it to send duetime's own statements without the builder's
 * query building, on the same connection and transaction.
 */
export function driverQuery(client: unknown): SqlExecutor['query'] | undefined {
  const c = client as {
    query?: (text: string, values: unknown[]) => Promise<{ rows: unknown[]; rowCount: number | null }>;
    getTransactionStatus?: unknown;
    unsafe?: (text: string, values: unknown[]) => PromiseLike<unknown[] & { count?: number | null }>;
  } | null;
  if (c === null || c === undefined) return undefined;
  if (typeof c.query === 'function' && typeof c.getTransactionStatus === 'function') {
    const query = c.query.bind(c) as (
      ...args: unknown[]
    ) => Promise<{ rows: unknown[]; rowCount: number | null }>;
    return async (text, params = [], name) => {
      const values = params as unknown[];
      // A named statement is parsed and planned once per connection (duetime names its own).
      const result = await (name === undefined ? query(text, values) : query({ name, text, values }));
      const rows = rowsOf(result.rows);
      return { rows, rowCount: countOf(result.rowCount, rows.length) };
    };
  }
  if (typeof c.unsafe === 'function') {
    const unsafe = c.unsafe.bind(c);
    return async (text, params = []) => {
      const result = await unsafe(text, arraysAsLiterals(params));
      const rows = rowsOf(result);
      return { rows, rowCount: countOf(result.count, rows.length) };
    };
  }
  return undefined;
}

/**
 * Whether a driver client takes statements sent without waiting for earlier ones: postgres.js (it
 * pipelines), a node-postgres client made with `pipeline: true`.
 */
export function takesConcurrent(client: unknown): boolean {
  const c = client as { pipeline?: unknown; unsafe?: unknown; getTransactionStatus?: unknown } | null;
  if (c === null || c === undefined) return false;
  if (typeof c.getTransactionStatus === 'function') return c.pipeline === true;
  return typeof c.unsafe === 'function';
}

/** The number a library reports as a count: a number, a bigint, or nothing (then `fallback`). */
export function countOf(value: unknown, fallback: number): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'bigint') return Number(value);
  return fallback;
}

/**
 * The count of a PGlite result (`{ rows, affectedRows }`): PGlite counts the rows a statement changed
 * only, so a SELECT's count is the rows it returned, as node-postgres counts.
 */
export function pgliteCount(affectedRows: unknown, rows: number): number {
  return Math.max(countOf(affectedRows, 0), rows);
}

/** Rows as plain objects (libraries return arrays with extra fields). */
export function rowsOf(rows: unknown): Record<string, unknown>[] {
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

/**
 * Rewrites `$1`, `$2`, … as `?` for libraries that bind positional `?` (Knex), repeating a parameter
 * where the statement uses it more than once. A literal `?` in the text is escaped for them.
 */
export function questionMarks(
  text: string,
  params: readonly unknown[],
): { text: string; bindings: unknown[] } {
  const bindings: unknown[] = [];
  const rewritten = text.replace(/\?/g, '\\?').replace(/\$(\d+)/g, (_match, index: string) => {
    const n = Number(index);
    if (n < 1 || n > params.length)
      throw new InvalidArgumentError(
        'text',
        text,
        `refers to $${n} but ${params.length} parameter(s) were given`,
      );
    bindings.push(params[n - 1]);
    return '?';
  });
  return { text: rewritten, bindings };
}

/**
 * Parameters with arrays written as PostgreSQL array literals (`{"a","b"}`), for drivers that would send
 * a JavaScript array as JSON (postgres.js): a statement that casts the parameter (`$1::text[]`) reads
 * the same values whichever driver sent it.
 */
export function arraysAsLiterals(params: readonly unknown[]): unknown[] {
  return params.map((value) => (Array.isArray(value) ? arrayLiteral(value) : value));
}

function arrayLiteral(values: readonly unknown[]): string {
  return `{${values.map(element).join(',')}}`;
}

function element(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  const text =
    value instanceof Date ? value.toISOString() : typeof value === 'string' ? value : JSON.stringify(value);
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}
