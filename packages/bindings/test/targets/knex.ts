import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import knexFactory, { type Knex } from 'knex';
import type pg from 'pg';
import { fromKnex, knexTransactions, toKnex } from '../../src/knex.js';

interface Db {
  knex: Knex;
  schema: string;
}

/** Knex: `fromKnex(trx)` and `toKnex(tx.sql)`. */
export const target: BindingTarget<Db> = {
  name: 'Knex',
  open: async ({ url, schema }) => ({
    knex: knexFactory({ client: 'pg', connection: url, pool: { min: 0, max: 4 } }),
    schema,
  }),
  close: ({ knex }) => knex.destroy(),
  transaction: ({ knex }, fn) => knex.transaction((trx) => fn(fromKnex(trx), trx)),
  async rollback({ knex }, fn) {
    const trx = await knex.transaction();
    try {
      await fn(fromKnex(trx), trx);
    } finally {
      await trx.rollback();
    }
  },
  failStatement: (_db, trx) => (trx as Knex.Transaction).raw('SELECT 1/0'),
  async notTransactions({ knex }) {
    const finished = await knex.transaction();
    await finished.commit();
    return [knex, finished];
  },
  bind: (handle) => fromKnex(handle as never),
  write: ({ schema }, client, key) =>
    toKnex(client as pg.PoolClient)('effects')
      .withSchema(schema)
      .insert({ key, via: 'Knex' })
      .then(() => {}),
  nested: { refused: (_db, client) => toKnex(client as pg.PoolClient).transaction(async () => {}) },
  bindDelivery: (_db, handle) => toKnex(handle as never),
};

/** Knex, processors in its own transactions: `knexTransactions(knex)`, `tx.sql` its `trx`. */
export const hosted: BindingTarget<Db> = {
  name: 'Knex, its own transactions',
  open: target.open,
  close: target.close,
  transactions: ({ knex }) => knexTransactions(knex) as TransactionRunner<unknown>,
  write: ({ schema }, trx, key) =>
    (trx as Knex.Transaction)('effects')
      .withSchema(schema)
      .insert({ key, via: 'Knex' })
      .then(() => {}),
};
