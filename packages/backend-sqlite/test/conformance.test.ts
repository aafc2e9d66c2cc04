import { rmSync } from 'node:fs';
import { runConformance } from '@duetime/conformance';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { directory, fileFor, open } from './adapter.js';

const namespaces = new Map<object, string>();

runConformance({
  name: 'sqlite',
  open: async (namespace) => {
    const backend = await open(namespace);
    namespaces.set(backend, namespace);
    return backend;
  },
  module: new URL('./adapter.ts', import.meta.url),
  // The application's own table, written through `tx.sql` (the writer connection inside the transaction).
  sql: {
    async setup(backend) {
      await backend.store.transact((tx) => {
        (tx.sql as Database.Database).exec('CREATE TABLE IF NOT EXISTS app_rows (id TEXT PRIMARY KEY)');
      });
    },
    async write(sql, id) {
      (sql as Database.Database).prepare('INSERT INTO app_rows (id) VALUES (?)').run(id);
    },
    async exec(sql, text) {
      return (sql as Database.Database).exec(text);
    },
    async rows(backend) {
      const db = new Database(fileFor(namespaces.get(backend)!), { readonly: true });
      try {
        return db.prepare('SELECT id FROM app_rows').pluck().all() as string[];
      } finally {
        db.close();
      }
    },
  },
});

afterAll(() => rmSync(directory, { recursive: true, force: true }));
