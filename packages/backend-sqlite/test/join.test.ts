import { Dispatcher, InvalidArgumentError } from '@duetime/core';
import Database from 'better-sqlite3';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { eventually, tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;
const expire = (id: string) => ({ type: 'order.expire', aggregateId: id });

/** A file with duetime's tables and the application's `orders`, and a backend on it. */
async function world() {
  const file = files.file('join');
  const backend = await createSqliteBackend({ filename: file });
  const app = new Database(file);
  app.pragma('journal_mode = WAL');
  app.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
  const orders = () => app.prepare('SELECT id FROM orders ORDER BY id').pluck().all() as string[];
  return { file, backend, app, orders };
}

describe('store.join on SQLite: duetime inside a transaction the application began', () => {
  it('commits with the application: its row and the schedule appear together, and a dispatcher delivers it', async () => {
    const { backend, app, orders } = await world();
    app.exec('BEGIN IMMEDIATE');
    app.prepare('INSERT INTO orders (id) VALUES (?)').run('o-1');
    await backend.store.join(app, (tx) =>
      tx.schedule('order/o-1/expire', new Date(Date.now() - 1), expire('o-1')),
    );
    // Not committed yet: another connection sees neither.
    expect(await backend.store.loadSchedule('order/o-1/expire')).toBeUndefined();
    app.exec('COMMIT');
    expect(orders()).toEqual(['o-1']);
    expect(await backend.store.loadSchedule('order/o-1/expire')).toMatchObject({ key: 'order/o-1/expire' });
    const seen: string[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      processor: async (_tx, _message, { schedule }) => void seen.push(schedule.key),
    });
    const running = dispatcher.run();
    await eventually('the delivery', () => seen.length === 1);
    await dispatcher.drain();
    await running;
    expect(seen).toEqual(['order/o-1/expire']);
    app.close();
    await backend.close();
  });

  it('rolls back with the application: neither the row nor the schedule stays', async () => {
    const { backend, app, orders } = await world();
    app.exec('BEGIN');
    app.prepare('INSERT INTO orders (id) VALUES (?)').run('o-2');
    await backend.store.join(app, async (tx) => {
      await tx.schedule('order/o-2/expire', new Date(Date.now() + HOUR), expire('o-2'));
      expect(await tx.loadSchedule('order/o-2/expire')).toBeDefined();
    });
    app.exec('ROLLBACK');
    expect(orders()).toEqual([]);
    expect(await backend.store.loadSchedule('order/o-2/expire')).toBeUndefined();
    app.close();
    await backend.close();
  });

  it('undoes only its own writes when its function throws, leaving the application’s transaction open and usable', async () => {
    const { backend, app, orders } = await world();
    await backend.store.transact((tx) => tx.schedule('order/kept', new Date(Date.now() + HOUR), expire('k')));
    app.exec('BEGIN');
    app.prepare('INSERT INTO orders (id) VALUES (?)').run('o-3');
    const failure = new Error('changed its mind');
    await expect(
      backend.store.join(app, async (tx) => {
        await tx.schedule('order/o-3/expire', new Date(Date.now() + HOUR), expire('o-3'));
        await tx.cancelSchedule('order/kept');
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(app.inTransaction).toBe(true);
    app.exec('COMMIT');
    expect(orders()).toEqual(['o-3']);
    expect(await backend.store.loadSchedule('order/o-3/expire')).toBeUndefined();
    expect(await backend.store.loadSchedule('order/kept')).toBeDefined();
    app.close();
    await backend.close();
  });

  it('joins a Kysely transaction over better-sqlite3: commit keeps both, a throw in it keeps neither', async () => {
    const { backend, app, orders } = await world();
    const db = new Kysely<{ orders: { id: string } }>({ dialect: new SqliteDialect({ database: app }) });
    await db.transaction().execute(async (trx) => {
      await trx.insertInto('orders').values({ id: 'k-1' }).execute();
      await backend.store.join(app, (tx) =>
        tx.schedule('order/k-1/expire', new Date(Date.now() + HOUR), expire('k-1')),
      );
    });
    await expect(
      db.transaction().execute(async (trx) => {
        await trx.insertInto('orders').values({ id: 'k-2' }).execute();
        await backend.store.join(app, (tx) =>
          tx.schedule('order/k-2/expire', new Date(Date.now() + HOUR), expire('k-2')),
        );
        throw new Error('payment refused');
      }),
    ).rejects.toThrow('payment refused');
    expect(orders()).toEqual(['k-1']);
    expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['order/k-1/expire']);
    await db.destroy();
    await backend.close();
  });

  it('joins a Drizzle session over better-sqlite3 between its own BEGIN and COMMIT', async () => {
    const { backend, app, orders } = await world();
    const db = drizzle({ client: app });
    db.run(sql`BEGIN IMMEDIATE`);
    db.run(sql`INSERT INTO orders (id) VALUES (${'d-1'})`);
    await backend.store.join(app, (tx) =>
      tx.schedule('order/d-1/expire', new Date(Date.now() + HOUR), expire('d-1')),
    );
    db.run(sql`COMMIT`);
    expect(orders()).toEqual(['d-1']);
    expect(await backend.store.loadSchedule('order/d-1/expire')).toBeDefined();
    app.close();
    await backend.close();
  });

  it('joins on the connection the backend was opened with ({ database })', async () => {
    const file = files.file('own');
    const app = new Database(file);
    app.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
    const backend = await createSqliteBackend({ database: app });
    app.exec('BEGIN');
    app.prepare('INSERT INTO orders (id) VALUES (?)').run('s-1');
    await backend.store.join(app, (tx) =>
      tx.schedule('order/s-1/expire', new Date(Date.now() + HOUR), expire('s-1')),
    );
    app.exec('COMMIT');
    expect(await backend.store.loadSchedule('order/s-1/expire')).toBeDefined();
    await backend.close();
    app.close();
  });

  it('refuses what is not an open transaction on its database with an InvalidArgumentError naming handle, writing nothing', async () => {
    const { backend, app } = await world();
    const elsewhere = new Database(files.file('elsewhere'));
    elsewhere.exec('BEGIN');
    const closed = new Database(files.file('closed'));
    closed.close();
    const memory = new Database(':memory:');
    memory.exec('BEGIN');
    for (const handle of [app, elsewhere, closed, memory, {}, null, 'app.db']) {
      const error = await backend.store
        .join(handle, (tx) => tx.schedule('never', new Date(Date.now() + HOUR), expire('n')))
        .catch((e: unknown) => e);
      expect(error, `joining ${String(handle)}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toContain('handle');
    }
    expect(await backend.store.countSchedules()).toBe(0);
    for (const db of [app, elsewhere, memory]) db.close();
    await backend.close();
  });
});
