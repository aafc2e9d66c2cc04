import type { BindingTarget } from '@duetime/bindings/conformance';
import pg from 'pg';
import { fromPg } from '../../src/pg.js';

interface Db {
  pool: pg.Pool;
  schema: string;
}

/** Runs `fn` on a pool client after `BEGIN`, ending with `end` (COMMIT or ROLLBACK), ROLLBACK on errors. */
async function inTransaction<T>(pool: pg.Pool, end: string, fn: (client: pg.PoolClient) => Promise<T>) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query(end);
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** node-postgres: `fromPg(client)` after `BEGIN`; in processors, `tx.sql` itself is the client. */
export const target: BindingTarget<Db> = {
  name: 'node-postgres',
  open: async ({ url, schema }) => ({ pool: new pg.Pool({ connectionString: url, max: 4 }), schema }),
  close: ({ pool }) => pool.end(),
  transaction: ({ pool }, fn) => inTransaction(pool, 'COMMIT', (client) => fn(fromPg(client), client)),
  rollback: ({ pool }, fn) => inTransaction(pool, 'ROLLBACK', (client) => fn(fromPg(client), client)),
  failStatement: (_db, client) => (client as pg.PoolClient).query('SELECT 1/0'),
  notTransactions: async ({ pool }) => [pool, null, {}],
  bind: (handle) => fromPg(handle as pg.PoolClient),
  write: ({ schema }, sql, key) =>
    (sql as pg.PoolClient)
      .query(`INSERT INTO "${schema}".effects (key, via) VALUES ($1, 'node-postgres')`, [key])
      .then(() => {}),
  nested: { refused: (_db, sql) => (sql as pg.PoolClient).query('BEGIN') },
};
