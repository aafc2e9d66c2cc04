import type { TransactionRunner } from '@duetime/core';
import type { Sql, TransactionSql } from 'postgres';
import type { SqlExecutor } from './executor.js';
import { arraysAsLiterals, countOf, refuse, rowsOf } from './executor.js';

/** The part of a postgres.js transaction a binding uses (the `sql` of `sql.begin(async (sql) => …)`). */
export interface PostgresJsTransactionLike {
  unsafe(query: string, parameters?: unknown[]): PromiseLike<unknown[] & { count?: number | null }>;
  savepoint: unknown;
}

/**
 * An executor on a postgres.js transaction: the `sql` that `sql.begin(async (sql) => …)` hands its
 * function. Pass it to `store.join`. The top-level `sql` is refused: it runs statements outside any
 * transaction.
 *
 * @example
 * await sql.begin(async (tx) => {
 *   await tx`INSERT INTO orders (id) VALUES (${id})`;
 *   await store.join(fromPostgresJs(tx), (dt) => dt.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromPostgresJs(tx: PostgresJsTransactionLike): SqlExecutor {
  const handle = tx as unknown as Record<string, unknown> | null;
  if (typeof handle?.unsafe !== 'function')
    refuse(tx, 'a postgres.js transaction (the sql handed to sql.begin(async (sql) => …))');
  if (typeof handle.savepoint !== 'function' || typeof handle.reserve === 'function')
    refuse(
      tx,
      'the sql handed to sql.begin(async (sql) => …), not the top-level sql (it has no transaction)',
    );
  return {
    async query(text, params = []) {
      const result = await tx.unsafe(text, arraysAsLiterals(params));
      const rows = rowsOf(result);
      return { rows, rowCount: countOf(result.count, rows.length) };
    },
    // postgres.js pipelines the statements of a transaction sent without waiting.
    concurrent: true,
  };
}

/**
 * Opens every duetime transaction with postgres.js (`sql.begin`): pass it as `createPostgresBackend`'s
 * `transactions` option, and processors get postgres.js's transaction `sql` as `tx.sql`, their writes
 * committing with the schedule's consumption. `sql` is the top-level `postgres(url)`; a transaction's is
 * refused.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: postgresJsTransactions(sql) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql`UPDATE orders SET status = 'expired' WHERE id = ${m.aggregateId!}` });
 */
// biome-ignore lint/complexity/noBannedTypes: postgres.js's own default for custom types
export function postgresJsTransactions<T extends Record<string, unknown> = {}>(
  sql: Sql<T>,
): TransactionRunner<TransactionSql<T>> {
  const handle = sql as unknown as Record<string, unknown> | null;
  if (typeof handle?.begin !== 'function' || typeof handle.savepoint === 'function')
    refuse(sql, 'the top-level postgres.js sql (postgres(url)), which opens transactions', 'sql');
  return (fn) => sql.begin((tx) => fn(fromPostgresJs(tx), tx as TransactionSql<T>)) as Promise<never>;
}
