import type { BindingTarget } from '@duetime/bindings/conformance';
import { sql, TransactionRollbackError } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { fromDrizzle, toDrizzle } from '../../src/drizzle.js';

interface Db {
  pool: pg.Pool;
  db: NodePgDatabase;
  schema: string;
}

/**
 * Drizzle's explicit rollback: `tx.rollback()` throws, and the transaction rejects with that error. The
 * target resolves instead, as an application that rolled back on purpose goes on.
 */
export async function drizzleRollback(
  db: { transaction: NodePgDatabase['transaction'] },
  fn: (tx: Parameters<Parameters<NodePgDatabase['transaction']>[0]>[0]) => Promise<void>,
): Promise<void> {
  await db
    .transaction(async (tx) => {
      await fn(tx);
      tx.rollback();
    })
    .catch((error: unknown) => {
      if (!(error instanceof TransactionRollbackError)) throw error;
    });
}

/** Drizzle on node-postgres: `fromDrizzle(tx)` and `toDrizzle(tx.sql)`. */
export const target: BindingTarget<Db> = {
  name: 'Drizzle (node-postgres)',
  async open({ url, schema }) {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    return { pool, db: drizzle(pool), schema };
  },
  close: ({ pool }) => pool.end(),
  transaction: ({ db }, fn) => db.transaction((tx) => fn(fromDrizzle(tx), tx)),
  rollback: ({ db }, fn) => drizzleRollback(db, (tx) => fn(fromDrizzle(tx), tx)),
  failStatement: (_db, tx) => (tx as NodePgDatabase).execute(sql`SELECT 1/0`),
  notTransactions: async ({ db }) => [db, 42],
  bind: (handle) => fromDrizzle(handle as never),
  write: ({ schema }, client, key) =>
    toDrizzle(client as pg.PoolClient)
      .execute(sql`INSERT INTO ${sql.raw(`"${schema}".effects`)} (key, via) VALUES (${key}, 'Drizzle')`)
      .then(() => {}),
  nested: { refused: (_db, client) => toDrizzle(client as pg.PoolClient).transaction(async () => {}) },
  bindDelivery: (_db, handle) => toDrizzle(handle as never),
};
