import { runConformance } from '@duetime/conformance';
import type pg from 'pg';
import { afterAll } from 'vitest';
import { dropSchemas, open, schemaFor } from './adapter.js';

const schemas = new WeakMap<object, string>();
/** The probe's table of the test running now (the suite's tests in this file run one after another). */
let table: string | undefined;
const tableOf = (backend: object) => `"${schemas.get(backend)}".app_rows`;

runConformance({
  name: 'postgres',
  open: async (namespace) => {
    const backend = await open(namespace);
    schemas.set(backend, schemaFor(namespace));
    return backend;
  },
  module: new URL('./adapter.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
  // The application's own table, written through `tx.sql` (the pg client running the transaction).
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
});

afterAll(dropSchemas);
