import type { BindingTarget } from '@duetime/bindings/conformance';
import type { PGlite, Transaction } from '@electric-sql/pglite';
import { sql, TransactionRollbackError } from 'drizzle-orm';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import { drizzle, type PgliteDatabase } from 'drizzle-orm/pglite';
import type pg from 'pg';
import { fromDrizzle, toDrizzle } from '../../src/drizzle.js';
import { fromPglite, pgliteTransactions } from '../../src/pglite.js';
import { target as knex } from './knex.js';
import { target as kysely } from './kysely.js';

interface Db {
  db: PGlite;
  schema: string;
}

function opened({ pglite, schema }: { pglite?: unknown; schema: string }): Db {
  if (!pglite) throw new Error('the PGlite targets run with the group’s pglite option');
  return { db: pglite as PGlite, schema };
}

const effects = (schema: string) => `"${schema}".effects`;

/** PGlite itself: `fromPglite(tx)`, and processors writing on `tx.sql` (duetime's transaction on PGlite). */
export const pgliteTarget: BindingTarget<Db> = {
  name: 'PGlite',
  open: async (server) => opened(server),
  close: async () => {},
  transaction: ({ db }, fn) => db.transaction((tx) => fn(fromPglite(tx), tx)),
  rollback: ({ db }, fn) =>
    db.transaction(async (tx) => {
      await fn(fromPglite(tx), tx);
      await tx.rollback();
    }),
  failStatement: (_db, tx) => (tx as Transaction).query('SELECT 1/0'),
  notTransactions: async ({ db }) => {
    let ended: Transaction | undefined;
    await db.transaction(async (tx) => {
      ended = tx;
    });
    return [db, ended, 42];
  },
  bind: (handle) => fromPglite(handle as never),
  write: async ({ schema }, client, key) => {
    await (client as pg.PoolClient).query(`INSERT INTO ${effects(schema)} (key, via) VALUES ($1, 'PGlite')`, [
      key,
    ]);
  },
};

/** PGlite opening every duetime transaction (`pgliteTransactions(db)`): processors write on its `tx`. */
export const pgliteTransactionsTarget: BindingTarget<Db> = {
  name: 'PGlite, transactions opened by PGlite',
  open: async (server) => opened(server),
  close: async () => {},
  transactions: ({ db }) => pgliteTransactions(db),
  write: async ({ schema }, tx, key) => {
    await (tx as Transaction).query(`INSERT INTO ${effects(schema)} (key, via) VALUES ($1, 'PGlite tx')`, [
      key,
    ]);
  },
};

interface DrizzleDb extends Db {
  orm: PgliteDatabase;
}

/** Drizzle on PGlite (`drizzle-orm/pglite`): `fromDrizzle(tx)`, and `toDrizzle(tx.sql)` in processors. */
export const drizzlePgliteTarget: BindingTarget<DrizzleDb> = {
  name: 'Drizzle (PGlite)',
  async open(server) {
    const db = opened(server);
    return { ...db, orm: drizzle({ client: db.db }) };
  },
  close: async () => {},
  transaction: ({ orm }, fn) => orm.transaction((tx) => fn(fromDrizzle(tx), tx)),
  rollback: ({ orm }, fn) =>
    orm
      .transaction(async (tx) => {
        await fn(fromDrizzle(tx), tx);
        tx.rollback();
      })
      .catch((error: unknown) => {
        if (!(error instanceof TransactionRollbackError)) throw error;
      }),
  failStatement: (_db, tx) => (tx as PgliteDatabase).execute(sql`SELECT 1/0`),
  notTransactions: async ({ orm }) => [orm, 42],
  bind: (handle) => fromDrizzle(handle as never),
  write: ({ schema }, client, key) =>
    toDrizzle(client as pg.PoolClient)
      .execute(sql`INSERT INTO ${sql.raw(effects(schema))} (key, via) VALUES (${key}, 'Drizzle')`)
      .then(() => {}),
  nested: {
    refused: (_db, client) =>
      (toDrizzle(client as pg.PoolClient) as NodePgDatabase).transaction(async () => {}),
  },
  bindDelivery: (_db, handle) => toDrizzle(handle as never),
};

/**
 * Processors on the PGlite backend writing through a library put on `tx.sql` (which answers as a
 * node-postgres client): the library's server target's processor cases, on PGlite.
 */
function onPglite<L>(library: BindingTarget<L>): BindingTarget<Db> {
  const { write, nested, bindDelivery } = library as unknown as BindingTarget<Db>;
  return {
    name: `${library.name} on PGlite (processors)`,
    open: async (server) => opened(server),
    close: async () => {},
    ...(write ? { write } : {}),
    ...(nested ? { nested } : {}),
    ...(bindDelivery ? { bindDelivery } : {}),
  };
}

export const kyselyPgliteTarget = onPglite(kysely);
export const knexPgliteTarget = onPglite(knex);
