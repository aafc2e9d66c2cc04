import { freshNamespace, waitFor } from '@duetime/conformance';
import { BackendError, Dispatcher, InvalidArgumentError, silentLogger } from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend, type TransactionRunner } from '../src/index.js';
import { dropSchemas, PG_URL, schemaFor, urlWithUser } from './adapter.js';
import { library } from './hosted-runner.js';

const HOUR = 3_600_000;

afterAll(dropSchemas);

async function hostedBackend() {
  const schema = schemaFor(freshNamespace());
  const duetimePool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 4 });
  const appPool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 4 });
  const lib = library(appPool);
  const backend = await createPostgresBackend(
    { pool: duetimePool },
    { schema, transactions: lib.transactions },
  );
  await appPool.query(
    `CREATE TABLE "${schema}".orders (id text PRIMARY KEY, expirations int NOT NULL DEFAULT 0)`,
  );
  const orders = async () =>
    Object.fromEntries(
      (await appPool.query(`SELECT id, expirations FROM "${schema}".orders ORDER BY id`)).rows.map((r) => [
        r.id,
        r.expirations,
      ]),
    );
  return {
    schema,
    backend,
    lib,
    orders,
    async close() {
      await backend.close();
      await duetimePool.end();
      await appPool.end();
    },
  };
}

describe('transactions opened by the application’s library (options.transactions)', () => {
  it('runs store.transact in the library’s transaction: tx.sql is its handle, commit and rollback are its own', async () => {
    const t = await hostedBackend();
    try {
      await t.backend.store.transact(async (tx) => {
        // tx.sql is the library's own handle (here its pg client), typed as the runner declares.
        const client: pg.PoolClient = tx.sql;
        await client.query(`INSERT INTO "${t.schema}".orders (id) VALUES ($1)`, ['o-1']);
        await tx.schedule('order/o-1/expire', new Date(Date.now() + HOUR), {
          type: 'order.expire',
          aggregateId: 'o-1',
        });
        // Reads inside the transaction see its writes.
        expect((await tx.loadSchedule('order/o-1/expire'))?.key).toBe('order/o-1/expire');
      });
      expect(t.lib.opened()).toBe(1);
      expect(await t.orders()).toEqual({ 'o-1': 0 });
      expect((await t.backend.store.loadSchedule('order/o-1/expire'))?.key).toBe('order/o-1/expire');

      await expect(
        t.backend.store.transact(async (tx) => {
          await tx.sql.query(`INSERT INTO "${t.schema}".orders (id) VALUES ($1)`, ['o-2']);
          await tx.schedule('order/o-2/expire', new Date(Date.now() + HOUR), { type: 'order.expire' });
          await tx.loadSchedule('order/o-2/expire');
          throw new Error('the application changes its mind');
        }),
      ).rejects.toThrow('the application changes its mind');
      expect(await t.orders()).toEqual({ 'o-1': 0 });
      expect(await t.backend.store.loadSchedule('order/o-2/expire')).toBeUndefined();
    } finally {
      await t.close();
    }
  });

  it('delivers in the library’s transactions: processor writes commit with consumption, a failing one undoes only its own', async () => {
    const t = await hostedBackend();
    try {
      await t.backend.store.transact(async (tx) => {
        for (const id of ['o-0', 'o-1', 'o-2']) {
          await tx.sql.query(`INSERT INTO "${t.schema}".orders (id) VALUES ($1)`, [id]);
          await tx.schedule(`order/${id}/expire`, new Date(Date.now() - 1000), {
            type: 'order.expire',
            aggregateId: id,
          });
        }
      });
      const attempts = new Map<string, number>();
      const dispatcher = new Dispatcher({
        store: t.backend.store,
        retryDelay: 20,
        logger: silentLogger,
        processor: async (tx, message) => {
          const id = message.aggregateId!;
          attempts.set(id, (attempts.get(id) ?? 0) + 1);
          await tx.sql.query(`UPDATE "${t.schema}".orders SET expirations = expirations + 1 WHERE id = $1`, [
            id,
          ]);
          if (id === 'o-1' && attempts.get(id) === 1) throw new Error('payment service down');
        },
      });
      const running = dispatcher.run();
      try {
        await waitFor(
          'every schedule consumed',
          async () => (await t.backend.store.listSchedules()).length === 0,
        );
      } finally {
        await dispatcher.drain();
        await running;
      }
      expect(await t.orders()).toEqual({ 'o-0': 1, 'o-1': 1, 'o-2': 1 });
      expect(attempts).toEqual(
        new Map([
          ['o-0', 1],
          ['o-1', 2],
          ['o-2', 1],
        ]),
      );
      expect(dispatcher.snapshot()).toMatchObject({ delivered: 3, failed: 1 });
    } finally {
      await t.close();
    }
  });

  it('refuses a runner that is not a function, naming the option, before connecting', async () => {
    await expect(
      createPostgresBackend(
        { connectionString: urlWithUser(PG_URL) },
        { transactions: 'drizzle' as unknown as TransactionRunner },
      ),
    ).rejects.toMatchObject({ field: 'options.transactions' });
    await expect(
      createPostgresBackend(
        { connectionString: urlWithUser(PG_URL) },
        { transactions: 'drizzle' as unknown as TransactionRunner },
      ),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('fails a transaction whose runner never runs its function, or hands no executor, and writes nothing', async () => {
    const schema = schemaFor(freshNamespace());
    const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 2 });
    try {
      const lazy = await createPostgresBackend(
        { pool },
        { schema, transactions: (async () => undefined) as unknown as TransactionRunner },
      );
      await expect(
        lazy.store.transact((tx) => tx.schedule('never/1', new Date(Date.now() + HOUR), { type: 't' })),
      ).rejects.toBeInstanceOf(BackendError);
      await lazy.close();
      const broken = await createPostgresBackend(
        { pool },
        {
          schema,
          transactions: ((fn: (e: unknown, h: unknown) => Promise<unknown>) =>
            fn({}, {})) as TransactionRunner,
        },
      );
      await expect(
        broken.store.transact((tx) => tx.schedule('never/2', new Date(Date.now() + HOUR), { type: 't' })),
      ).rejects.toMatchObject({ field: 'options.transactions' });
      expect(await broken.store.listSchedules()).toEqual([]);
      await broken.close();
    } finally {
      await pool.end();
    }
  });
});
