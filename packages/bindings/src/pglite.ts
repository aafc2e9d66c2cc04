import type { TransactionRunner } from '@duetime/core';
import type { SqlExecutor } from './executor.js';
import { pgliteCount, refuse, rowsOf } from './executor.js';

/** The part of a PGlite transaction a binding uses (the `tx` of `db.transaction(async (tx) => …)`). */
export interface PGliteTransactionLike {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; affectedRows?: number }>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

/** The part of a PGlite database a runner uses (`await PGlite.create()`). */
export interface PGliteLike<Tx extends PGliteTransactionLike = PGliteTransactionLike> {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/**
 * An executor on a PGlite transaction (`@electric-sql/pglite`, the `tx` of
 * `db.transaction(async (tx) => …)`), for a backend opened on the same database
 * (`createPostgresBackend({ pglite: db })`). Pass it to `store.join`. The database itself is refused:
 * its statements run outside any transaction; so is a transaction that has ended.
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await tx.query('INSERT INTO orders (id) VALUES ($1)', [id]);
 *   await store.join(fromPglite(tx), (dt) => dt.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromPglite(tx: PGliteTransactionLike): SqlExecutor {
  const handle = tx as unknown as Record<string, unknown> | null;
  if (typeof handle?.query !== 'function' || typeof handle.rollback !== 'function')
    refuse(
      tx,
      typeof handle?.transaction === 'function'
        ? 'a PGlite transaction (the tx of db.transaction(async (tx) => …)), not the database itself'
        : 'a PGlite transaction (the tx of db.transaction(async (tx) => …))',
    );
  if (tx.closed) refuse(tx, 'an open PGlite transaction, not one that has ended');
  return {
    async query(text, params = []) {
      const result = await tx.query(text, params as unknown[]);
      const rows = rowsOf(result.rows);
      return { rows, rowCount: pgliteCount(result.affectedRows, rows.length) };
    },
    inTransaction: () => !tx.closed,
    // One session: its statements run one after another.
    concurrent: false,
  };
}

/**
 * Opens every duetime transaction with PGlite's own `db.transaction`: pass it as `createPostgresBackend`'s
 * `transactions` option (with `{ pglite: db }` as the connection), and processors get the PGlite
 * transaction as `tx.sql`, their writes committing with the schedule's consumption (for a library's
 * PGlite driver on it, or `tx.sql.query`).
 *
 * @example
 * const backend = await createPostgresBackend({ pglite: db }, { transactions: pgliteTransactions(db) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql.query("UPDATE orders SET status = 'expired' WHERE id = $1", [m.aggregateId]) });
 */
export function pgliteTransactions<Tx extends PGliteTransactionLike>(
  db: PGliteLike<Tx>,
): TransactionRunner<Tx> {
  const handle = db as unknown as Record<string, unknown> | null;
  if (typeof handle?.transaction !== 'function' || typeof handle.rollback === 'function')
    refuse(db, 'a PGlite database (await PGlite.create()), which opens transactions', 'db');
  return (fn) => db.transaction((tx) => fn(fromPglite(tx), tx));
}
