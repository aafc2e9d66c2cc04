import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import { sql } from 'drizzle-orm';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { drizzleTransactions, fromDrizzle } from '../../src/drizzle.js';
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

/** Drizzle on postgres.js, processors in its own transactions: `drizzleTransactions(db)`, `tx.sql` its `tx`. */
export const hosted: BindingTarget<Db & { schema: string }> = {
  name: 'Drizzle (postgres.js), its own transactions',
  async open(server) {
    return { ...(await target.open(server)), schema: server.schema };
  },
  close: target.close,
  transactions: ({ db }) => drizzleTransactions(db) as TransactionRunner<unknown>,
  write: ({ schema }, tx, key) =>
    (tx as PostgresJsDatabase)
      .insert(
        pgSchema(schema).table('effects', { key: text('key').primaryKey(), via: text('via').notNull() }),
      )
      .values({ key, via: 'Drizzle (postgres.js)' })
      .then(() => {}),
};
