import type { ConformanceTarget } from '@duetime/conformance';
import type { Backend } from '@duetime/core';
import type pg from 'pg';
import { schemaFor } from './adapter.js';

/**
 * What the conformance suite needs of a PostgreSQL target beyond `open`: the schema of each backend it
 * opened, and the SQL probe writing the application's own table through `tx.sql` (a pg client, whether
 * duetime's or the application's library's).
 */
export function postgresProbe(open: (namespace: string) => Promise<Backend<pg.PoolClient>>): {
  open: ConformanceTarget['open'];
  sql: NonNullable<ConformanceTarget['sql']>;
} {
  const schemas = new WeakMap<object, string>();
  /** The probe's table of the test running now (the suite's tests in a file run one after another). */
  let table: string | undefined;
  const tableOf = (backend: object) => `"${schemas.get(backend)}".app_rows`;
  return {
    open: async (namespace) => {
      const backend = await open(namespace);
      schemas.set(backend, schemaFor(namespace));
      return backend;
    },
    sql: {
      async setup(backend) {
        table = tableOf(backend);
        const name = table;
        await backend.store.transact(async (tx) => {
          await (tx.sql as pg.PoolClient).query(`CREATE TABLE IF NOT EXISTS ${name} (id text PRIMARY KEY)`);
        });
      },
      async write(sql, id) {
        if (!table) throw new Error('the SQL probe was not set up');
        await (sql as pg.PoolClient).query(`INSERT INTO ${table} (id) VALUES ($1)`, [id]);
      },
      exec: (sql, text) => (sql as pg.PoolClient).query(text),
      async rows(backend) {
        const result = await backend.store.transact((tx) =>
          (tx.sql as pg.PoolClient).query<{ id: string }>(`SELECT id FROM ${tableOf(backend)}`),
        );
        return result.rows.map((row) => row.id);
      },
    },
  };
}
