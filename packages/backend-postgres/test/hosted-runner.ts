import type pg from 'pg';
import type { TransactionRunner } from '../src/index.js';

/**
 * The application's own library, here node-postgres on a pool of the application's: its transaction
 * function, which commits when `fn` returns and rolls back when it throws, hands duetime an executor and
 * its client. Records how many transactions it opened.
 */
export function library(pool: pg.Pool) {
  let opened = 0;
  const transactions: TransactionRunner<pg.PoolClient> = async (fn) => {
    const client = await pool.connect();
    opened++;
    try {
      await client.query('BEGIN');
      const result = await fn(
        {
          query: async (text, params) => {
            const r = await client.query(text, [...params]);
            return { rows: r.rows, rowCount: r.rowCount ?? r.rows.length };
          },
        },
        client,
      );
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  };
  return { transactions, opened: () => opened };
}
