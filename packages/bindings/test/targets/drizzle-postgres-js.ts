import type { BindingTarget } from '@duetime/bindings/conformance';
import { sql } from 'drizzle-orm';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { fromDrizzle } from '../../src/drizzle.js';
import { drizzleRollback } from './drizzle-node-postgres.js';

interface Db {
  client: postgres.Sql;
  db: PostgresJsDatabase;
}

/** Drizzle on postgres.js: `fromDrizzle(tx)`; join only (processors run Drizzle on `tx.sql`, node-postgres). */
export const target: BindingTarget<Db> = {
  name: 'Drizzle (postgres.js)',
  async open({ url }) {
    const client = postgres(url, { max: 4, onnotice: () => {} });
    return { client, db: drizzle(client) };
  },
  close: ({ client }) => client.end(),
  transaction: ({ db }, fn) => db.transaction((tx) => fn(fromDrizzle(tx), tx)),
  rollback: ({ db }, fn) => drizzleRollback(db as never, (tx) => fn(fromDrizzle(tx), tx)),
  failStatement: (_db, tx) => (tx as PostgresJsDatabase).execute(sql`SELECT 1/0`),
  notTransactions: async ({ db }) => [db],
  bind: (handle) => fromDrizzle(handle as never),
};
