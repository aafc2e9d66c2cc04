import { InvalidArgumentError } from '@duetime/core';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';
import { rejection } from './adapter.js';

let db: PGlite;
beforeAll(async () => {
  db = await PGlite.create();
});
afterAll(() => db.close());

describe('PGlite connection', () => {
  it('refuses what is not a PGlite database, and pipeline, naming the field', async () => {
    const tx = await db.transaction(async (t) => t);
    for (const bad of [null, {}, { query() {} }, tx]) {
      const error = await rejection(createPostgresBackend({ pglite: bad as never }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe('connection.pglite');
    }
    const error = await rejection(createPostgresBackend({ pglite: db }, { pipeline: true }));
    expect((error as InvalidArgumentError).field).toBe('options.pipeline');
  });

  it('declares one process, and tx.sql reads as node-postgres does (int8 as text, json parsed, instants as dates)', async () => {
    const backend = await createPostgresBackend({ pglite: db }, { schema: 'pglite_shape' });
    try {
      expect(backend.capabilities.multiProcess).toBe(false);
      const row = await backend.store.transact(async (tx) => {
        const { rows, rowCount } = await tx.sql.query(
          `SELECT 9007199254740993::int8 AS big, '{"a":[1]}'::json AS doc, '2026-01-02T03:04:05Z'::timestamptz AS at, $1::text[] AS list`,
          [['x', 'y']],
        );
        expect(rowCount).toBe(1);
        return rows[0];
      });
      expect(row).toEqual({
        big: '9007199254740993',
        doc: { a: [1] },
        at: new Date('2026-01-02T03:04:05Z'),
        list: ['x', 'y'],
      });
      // A callback, as node-postgres takes one (Knex passes one).
      const viaCallback = await backend.store.transact(
        (tx) =>
          new Promise((resolve, reject) => {
            (tx.sql.query as (text: string, cb: (e: Error | null, r?: { rows: unknown[] }) => void) => void)(
              'SELECT 2 AS n',
              (error, result) => (error ? reject(error) : resolve(result!.rows)),
            );
          }),
      );
      expect(viaCallback).toEqual([{ n: 2 }]);
      // Transaction control through tx.sql is refused, as on a server.
      const error = await rejection(backend.store.transact((tx) => tx.sql.query('COMMIT')));
      expect((error as InvalidArgumentError).field).toBe('tx.sql');
    } finally {
      await backend.close();
    }
  });

  it('reports a failure at COMMIT (a deferred constraint) as the transaction’s, committing nothing', async () => {
    const backend = await createPostgresBackend({ pglite: db }, { schema: 'pglite_commit' });
    try {
      await db.exec(
        'CREATE TABLE IF NOT EXISTS pglite_commit.once (id text PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)',
      );
      const error = await rejection(
        backend.store.transact(async (tx) => {
          await tx.sql.query(`INSERT INTO pglite_commit.once VALUES ('a'), ('a')`);
          await tx.schedule('commit/1', new Date(Date.now() + 60_000), { type: 'x' });
        }),
      );
      expect(error.message).toMatch(/duplicate key/);
      expect(await backend.store.listSchedules()).toEqual([]);
      expect((await db.query('SELECT id FROM pglite_commit.once')).rows).toEqual([]);
      // The session is free again.
      await backend.store.transact((tx) =>
        tx.schedule('commit/2', new Date(Date.now() + 60_000), { type: 'x' }),
      );
      expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['commit/2']);
    } finally {
      await backend.close();
    }
  });

  it('queues the application’s transactions and duetime’s on the one session: both commit, in turn', async () => {
    const backend = await createPostgresBackend({ pglite: db }, { schema: 'pglite_turns' });
    try {
      await db.exec('CREATE TABLE IF NOT EXISTS pglite_turns.rows (id text PRIMARY KEY)');
      const order: string[] = [];
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => {
        inside = resolve;
      });
      const app = db.transaction(async (tx) => {
        inside();
        await tx.query(`INSERT INTO pglite_turns.rows VALUES ('app')`);
        await new Promise((resolve) => setTimeout(resolve, 100));
        order.push('app');
      });
      await entered;
      // Its statements wait for the application's transaction to end; then it commits its own.
      await backend.store.transact(async (tx) => {
        await tx.schedule('turns/1', new Date(Date.now() + 60_000), { type: 'x' });
      });
      order.push('duetime committed');
      await app;
      expect(order).toEqual(['app', 'duetime committed']);
      expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['turns/1']);
      expect((await db.query('SELECT id FROM pglite_turns.rows')).rows).toEqual([{ id: 'app' }]);
    } finally {
      await backend.close();
    }
  });
});
