import type { TransactionRunner } from '@duetime/core';
import { type SQL, sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import type pg from 'pg';
import type { SqlExecutor } from './executor.js';
import {
  arraysAsLiterals,
  countOf,
  deliveryClient,
  driverQuery,
  pgInTransaction,
  pgliteCount,
  refuse,
  rowsOf,
  takesConcurrent,
} from './executor.js';

/** The part of a Drizzle PostgreSQL transaction a binding uses (`db.transaction(async (tx) => …)`). */
export interface DrizzleTransactionLike {
  execute(query: SQL): PromiseLike<unknown>;
  rollback(): unknown;
}

/**
 * An executor on a Drizzle transaction on PostgreSQL (`db.transaction(async (tx) => …)`), over
 * node-postgres, postgres.js or PGlite. Pass it to `store.join`. The `db` itself is refused: it runs statements
 * outside any transaction.
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id });
 *   await store.join(fromDrizzle(tx), (dt) => dt.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromDrizzle(tx: DrizzleTransactionLike): SqlExecutor {
  const handle = tx as unknown as { execute?: unknown; rollback?: unknown; transaction?: unknown } | null;
  if (typeof handle?.execute !== 'function')
    refuse(tx, 'a Drizzle transaction (the tx of db.transaction(async (tx) => …))');
  if (typeof handle.rollback !== 'function')
    refuse(tx, 'a Drizzle transaction (db.transaction(async (tx) => …)), not the db itself');
  const client = (tx as unknown as { session?: { client?: unknown } }).session?.client;
  return {
    // duetime's statements go straight to the driver's client of the transaction (node-postgres's, or
    // postgres.js's), on the same connection: Drizzle's query building would cost more than the rest of a
    // join. Through Drizzle where its session holds neither.
    query:
      driverQuery(client) ??
      (async (text, params = []) => {
        const result = (await tx.execute(withParams(text, arraysAsLiterals(params)))) as {
          rows?: unknown;
          rowCount?: unknown;
          count?: unknown;
          affectedRows?: unknown;
        };
        // node-postgres answers { rows, rowCount }; postgres.js a row array with `count`; PGlite
        // { rows, affectedRows }.
        const rows = rowsOf(Array.isArray(result) ? result : result.rows);
        return {
          rows,
          rowCount:
            result.rowCount === undefined && result.count === undefined
              ? pgliteCount(result.affectedRows, rows.length)
              : countOf(result.rowCount ?? result.count, rows.length),
        };
      }),
    // On node-postgres the transaction's session holds the pg client, which knows its status; on
    // postgres.js it cannot tell, and the store asks with a savepoint.
    inTransaction: () => pgInTransaction(client),
    concurrent: takesConcurrent(client),
  };
}

/**
 * `text` with `$1`, `$2`, … as Drizzle parameters, so the driver binds them (never inlined): one flat
 * `sql` of the text's pieces and the values between them (Drizzle builds a flat one faster than pieces
 * joined).
 */
function withParams(text: string, params: readonly unknown[]): SQL {
  const strings: string[] = [];
  const values: unknown[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    strings.push(text.slice(last, match.index));
    values.push(params[Number(match[1]) - 1]);
    last = match.index + match[0].length;
  }
  strings.push(text.slice(last));
  return sql(Object.assign(strings, { raw: strings }) as TemplateStringsArray, ...values);
}

/**
 * The other direction: a Drizzle database on the delivery transaction's client (`tx.sql` in a processor
 * on the PostgreSQL backend), so a processor writes through Drizzle and its writes commit with the
 * schedule's consumption, or roll back with its part when it throws. Cheap enough to make per message.
 * A `db.transaction()` on it is refused (it would begin a transaction inside duetime's); nest with
 * savepoints through `db.execute(sql\`SAVEPOINT …\`)` if you must.
 *
 * @example
 * const dispatcher = new Dispatcher({
 *   store: backend.store,
 *   processor: async (tx, message) => {
 *     await toDrizzle(tx.sql).update(orders).set({ status: 'expired' }).where(eq(orders.id, message.aggregateId));
 *   },
 * });
 */
export function toDrizzle<TSchema extends Record<string, unknown> = Record<string, never>>(
  client: pg.ClientBase,
  config: { schema?: TSchema } = {},
): NodePgDatabase<TSchema> {
  return drizzle({ client: deliveryClient(client) as pg.PoolClient, ...config }) as NodePgDatabase<TSchema>;
}

/**
 * Opens every duetime transaction with Drizzle (`db.transaction`), over node-postgres or postgres.js:
 * pass it as `createPostgresBackend`'s `transactions` option, and processors get Drizzle's transaction as
 * `tx.sql`, typed, their writes committing with the schedule's consumption. The way for a Drizzle
 * service on postgres.js, whose driver cannot run on duetime's pg client (`toDrizzle`).
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: drizzleTransactions(db) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql.update(orders).set({ status: 'expired' }).where(eq(orders.id, m.aggregateId!)) });
 */
export function drizzleTransactions<Tx extends DrizzleTransactionLike>(db: {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}): TransactionRunner<Tx> {
  const handle = db as unknown as { transaction?: unknown; rollback?: unknown } | null;
  if (typeof handle?.transaction !== 'function' || typeof handle.rollback === 'function')
    refuse(db, 'a Drizzle database (drizzle(…), not a transaction), which opens transactions', 'db');
  return (fn) => db.transaction((tx) => fn(fromDrizzle(tx), tx));
}
