import type { SqlExecutor } from './executor.js';
import { countOf, driverQuery, pgInTransaction, refuse, rowsOf, takesConcurrent } from './executor.js';

/** The part of a node-postgres client a binding uses (`pg.PoolClient`, `pg.Client`). */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/**
 * An executor on a node-postgres client (`pg.PoolClient` or `pg.Client`) inside a transaction the
 * application began (`BEGIN`). Pass it to `store.join`. Not a `pg.Pool`: a pool runs each statement on
 * whichever connection is free, outside any transaction.
 *
 * @example
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await client.query('INSERT INTO orders (id) VALUES ($1)', [id]);
 * await store.join(fromPg(client), (tx) => tx.schedule(`order/${id}/expire`, expiry, message));
 * await client.query('COMMIT');
 */
export function fromPg(client: PgClientLike): SqlExecutor {
  if (typeof (client as { query?: unknown } | null)?.query !== 'function')
    refuse(client, 'a node-postgres client (pg.PoolClient or pg.Client) inside a transaction');
  if (typeof (client as { totalCount?: unknown }).totalCount === 'number')
    refuse(client, 'a client checked out of the pool (pool.connect()), not the pg.Pool itself');
  return {
    // Named statements (prepared once per connection) on a node-postgres client that tells its status.
    query:
      driverQuery(client) ??
      (async (text, params = []) => {
        const result = await client.query(text, params as unknown[]);
        const rows = rowsOf(result.rows);
        return { rows, rowCount: countOf(result.rowCount, rows.length) };
      }),
    inTransaction: () => pgInTransaction(client),
    concurrent: takesConcurrent(client),
  };
}
