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
  };
}
