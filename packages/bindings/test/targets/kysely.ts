import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import { fromKysely, kyselyTransactions, toKysely } from '../../src/kysely.js';

interface Tables {
  effects: { key: string; via: string };
}

interface Db {
  db: Kysely<Tables>;
  schema: string;
}

/** Kysely: `fromKysely(trx)` and `toKysely(tx.sql)`. */
export const target: BindingTarget<Db> = {
  name: 'Kysely',
  open: async ({ url, schema }) => ({
    db: new Kysely<Tables>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 4 }) }),
    }),
    schema,
  }),
  close: ({ db }) => db.destroy(),
  transaction: ({ db }, fn) => db.transaction().execute((trx) => fn(fromKysely(trx), trx)),
  async rollback({ db }, fn) {
    const trx = await db.startTransaction().execute();
    try {
      await fn(fromKysely(trx), trx);
    } finally {
      await trx.rollback().execute();
    }
  },
  failStatement: (_db, trx) => sql`SELECT 1/0`.execute(trx as Kysely<Tables>),
  notTransactions: async ({ db }) => [db, 'db'],
  bind: (handle) => fromKysely(handle as never),
  write: ({ schema }, client, key) =>
    toKysely<Tables>(client as pg.PoolClient)
      .withSchema(schema)
      .insertInto('effects')
      .values({ key, via: 'Kysely' })
      .execute()
      .then(() => {}),
  nested: {
    refused: (_db, client) =>
      toKysely<Tables>(client as pg.PoolClient)
        .transaction()
        .execute(async () => {}),
  },
  bindDelivery: (_db, handle) => toKysely(handle as never),
};

/** Kysely, processors in its own transactions: `kyselyTransactions(db)`, `tx.sql` its `Transaction`. */
export const hosted: BindingTarget<Db> = {
  name: 'Kysely, its own transactions',
  open: target.open,
  close: target.close,
  transactions: ({ db }) => kyselyTransactions(db) as TransactionRunner<unknown>,
  write: ({ schema }, trx, key) =>
    (trx as Transaction<Tables>)
      .withSchema(schema)
      .insertInto('effects')
      .values({ key, via: 'Kysely' })
      .execute()
      .then(() => {}),
};
