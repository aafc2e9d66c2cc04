import { runConformance } from '@duetime/conformance';
import type pg from 'pg';
import { afterAll } from 'vitest';
import { dropSchemas, schemaFor } from './adapter.js';
import { closeAppPool, open } from './adapter-hosted.js';

// The store's groups of the conformance suite on a backend whose every transaction the application's
// library opens (`options.transactions`): deliveries, batches and their savepoints, dead letters,
// recurrences, crashes and processes, through the library's transactions instead of duetime's. Left
// out: transactionControl (tx.sql is the library's own handle, whose COMMIT duetime does not guard), the
// lease, cursor and calendar groups (they use no store transaction), and crashes (the claims and crash
// counting it checks are the same code with either kind of transaction; processes covers SIGKILL here).

const schemas = new WeakMap<object, string>();
let table: string | undefined;
const tableOf = (backend: object) => `"${schemas.get(backend)}".app_rows`;

runConformance({
  name: 'postgres, transactions opened by the application’s library',
  open: async (namespace) => {
    const backend = await open(namespace);
    schemas.set(backend, schemaFor(namespace));
    return backend;
  },
  module: new URL('./adapter-hosted.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
  only: [
    'schedules',
    'sharing',
    'dispatcher',
    'batches',
    'deadLetters',
    'recurring',
    'operations',
    'reads',
    'pushChannel',
    'processes',
  ],
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

afterAll(async () => {
  await closeAppPool();
  await dropSchemas();
});
