import type { BindingTarget } from '@duetime/bindings/conformance';
import postgres from 'postgres';
import { fromPostgresJs } from '../../src/postgres-js.js';

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
