import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import postgres from 'postgres';
import { fromPostgresJs, postgresJsTransactions } from '../../src/postgres-js.js';

/** postgres.js: `fromPostgresJs(sql)` in `sql.begin`; join only (no explicit rollback in `sql.begin`). */
export const target: BindingTarget<postgres.Sql> = {
  name: 'postgres.js',
  open: async ({ url }) => postgres(url, { max: 4, onnotice: () => {} }),
  close: (sql) => sql.end(),
  transaction: (sql, fn) => sql.begin((tx) => fn(fromPostgresJs(tx), tx)) as Promise<never>,
  failStatement: (_sql, tx) => (tx as postgres.TransactionSql)`SELECT 1/0`.then(() => {}),
  notTransactions: async (sql) => [sql, {}],
  bind: (handle) => fromPostgresJs(handle as never),
};

/** postgres.js, processors in its own transactions: `postgresJsTransactions(sql)`, `tx.sql` its `sql`. */
export const hosted: BindingTarget<{ sql: postgres.Sql; schema: string }> = {
  name: 'postgres.js, its own transactions',
  open: async ({ url, schema }) => ({ sql: postgres(url, { max: 4, onnotice: () => {} }), schema }),
  close: ({ sql }) => sql.end(),
  transactions: ({ sql }) => postgresJsTransactions(sql) as TransactionRunner<unknown>,
  write: ({ schema }, tx, key) =>
    (tx as postgres.TransactionSql)`INSERT INTO ${(tx as postgres.TransactionSql)(schema)}.effects (key, via) VALUES (${key}, 'postgres.js')`.then(
      () => {},
    ),
};
